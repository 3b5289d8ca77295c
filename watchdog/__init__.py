"""train-watchdog: keeps long multi-GPU training jobs alive and never lets one fail silently."""

__version__ = "0.1.0"
