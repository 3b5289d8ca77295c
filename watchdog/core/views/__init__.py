"""PURE views for people: the status object (SPEC §7), the timeline (SPEC §13), goodput and the
texts of a command's reply (SPEC §8).

Imports: core's top-level modules, core.supervisor (the snapshot it shows) and core.health.
"""
