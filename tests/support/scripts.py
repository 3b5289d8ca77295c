"""Small jobs written into a test's folder (harness.write_script)."""

from __future__ import annotations

import pathlib

from support.harness import write_script


def stepper(tmp: pathlib.Path) -> str:
    """A job that prints a numbered progress line every 50 ms."""
    return write_script(
        tmp / "stepper.py",
        """
        import time
        step = 0
        while True:
            step += 1
            print(f"step {step} 9,000.0 tok/s", flush=True)
            time.sleep(0.05)
        """,
    )


def sleeper(tmp: pathlib.Path, ignore_term: bool = False) -> str:
    """A job that prints one progress line, then sleeps (ignoring SIGTERM if asked)."""
    return write_script(
        tmp / "sleeper.py",
        f"""
        import signal, time
        if {ignore_term}:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("up 9,000.0 tok/s", flush=True)
        while True:
            time.sleep(1)
    """,
    )
