"""Benchmarks of train-watchdog side by side with supervisord (and systemd where it is PID 1).

Run them all with `make bench` (a few minutes) or `make bench-quick` (under a minute); see
bench/README.md for what each number means.
"""
