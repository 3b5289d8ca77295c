"""Tests of the benchmark machinery (run: python -m pytest bench/tests -q)."""
