"""PURE control protocol (SPEC §8): `wire` (framing and the command table), `jsoncodec` (JSON
without importing `json`, so `watchdogctl` starts fast) and `replies` (the texts a reply shows).
Imports nothing else of ours: `watchdogctl` imports this package and nothing more of the core.
"""
