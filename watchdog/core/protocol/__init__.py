"""PURE control protocol (SPEC §8): `wire` (framing and the command table) and `jsoncodec` (JSON
without importing `json`, so `watchdogctl` starts fast); the texts a reply shows are views
(core/views/replies.py). Imports nothing else of ours: `watchdogctl` imports this package and
nothing more of the core.
"""
