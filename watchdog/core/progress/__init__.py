"""PURE reading of the job's progress lines (SPEC §6, §13, §14).

`auto` holds the recognisers of `progress.format: auto` (with `frameworks` for the frameworks'
own lines and `parsing` for what they return and share, and a user's pattern),
`tracker.ProgressTracker` judges one run's lines, and `stall_window` learns how long a silence
may last. Imports: core's top-level modules only.
"""
