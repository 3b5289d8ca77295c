"""How long `status` goes unanswered during `watchdogctl reexec` (issue 13's goal: < 1 s).

    python -m bench.reexec [N]      N re-execs (default 10) of a daemon supervising a tiny job

A prober sends `status` over the control socket back to back, one request at a time, and
records when each reply came. The window of a re-exec is the longest gap between two
consecutive replies while it ran (a status sent during the exec waits in the listener's backlog
and is answered by the new code). Also printed: the whole `watchdogctl reexec` (the new code's
pre-flight check, the exec, its start-up, the reply). Same daemon pid and job pid are checked.
"""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import BIN, clean_env, daemon_argv, median, percentile, procs_cleanup
from watchdog.core.protocol import wire as protocol

JOB = """#!/bin/sh
while :; do echo "step 1 9,000.0 tok/s"; sleep 0.1; done
"""


def _config(tmp: Path) -> Path:
    job = tmp / "job.sh"
    job.write_text(JOB)
    job.chmod(0o755)
    cfg = {
        "job": {"name": "bench", "command": [str(job)], "log_file": str(tmp / "job.log")},
        "gpus": {"devices": [], "sample_interval_s": 0.5},
        "control": {"socket": str(tmp / "ctl.sock")},
        "state_dir": str(tmp / "state"),
    }
    path = tmp / "watchdog.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def _status(sock_path: str) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(sock_path)
        s.sendall(protocol.encode_request(1, "status"))
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
    result: dict[str, object] = protocol.decode_reply(buf)["result"]
    return result


class Prober(threading.Thread):
    def __init__(self, sock_path: str) -> None:
        super().__init__(daemon=True)
        self.sock_path = sock_path
        self.replies: list[float] = []
        self.failures = 0
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                _status(self.sock_path)
                self.replies.append(time.monotonic())
            except OSError as e:
                self.failures += 1  # refused or reset: the window stays open until a reply
                self.errors.append(f"{type(e).__name__}: {e}")

    def longest_gap(self, t0: float, t1: float) -> float:
        inside = [t for t in self.replies if t0 <= t <= t1]
        before = [t for t in self.replies if t < t0][-1:]
        after = [t for t in self.replies if t > t1][:1]
        points = before + inside + after
        return max((b - a for a, b in itertools.pairwise(points)), default=t1 - t0)


def _pid(obj: object) -> object:
    return obj.get("pid") if isinstance(obj, dict) else None


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 10
    with tempfile.TemporaryDirectory() as d, procs_cleanup() as procs:
        tmp = Path(d)
        cfg = _config(tmp)
        sock = str(tmp / "ctl.sock")
        proc = procs.popen(
            daemon_argv([str(BIN / "watchdogd"), "--config", str(cfg)]), env=clean_env()
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                st = _status(sock)
                if st["state"] == "running":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the daemon did not come up")
            time.sleep(0.05)
        job, daemon = st["job"], st["daemon"]
        prober = Prober(sock)
        prober.start()
        windows, totals = [], []
        for _ in range(n):
            time.sleep(0.3)
            t0 = time.monotonic()
            r = subprocess.run(
                [str(BIN / "watchdogctl"), "--socket", sock, "reexec"],
                capture_output=True,
                text=True,
                timeout=150,
            )
            t1 = time.monotonic()
            if r.returncode != 0:
                print(f"reexec failed: {r.stderr}", file=sys.stderr)
                return 1
            time.sleep(0.1)  # the prober's next reply closes the window
            windows.append(prober.longest_gap(t0, t1))
            totals.append(t1 - t0)
        prober.stop.set()
        prober.join(35)
        after = _status(sock)
        same = after["job"] == job or (
            isinstance(after["job"], dict)
            and isinstance(job, dict)
            and after["job"]["pid"] == job["pid"]
        )
        same_daemon = isinstance(after["daemon"], dict) and isinstance(daemon, dict)
        same_daemon = same_daemon and after["daemon"]["pid"] == daemon["pid"] == proc.pid  # type: ignore[index]
        print(
            f"{n} reexecs; status probes answered: {len(prober.replies)}, failed: {prober.failures}"
        )
        print(
            f"  status unanswered window: p50 {median(windows) * 1000:.0f} ms, "
            f"max {max(windows) * 1000:.0f} ms (goal < 1000 ms)"
        )
        print(
            f"  watchdogctl reexec, whole: p50 {median(totals) * 1000:.0f} ms, "
            f"p90 {percentile(totals, 90) * 1000:.0f} ms"
        )
        print(f"  same daemon pid: {same_daemon}; same job pid: {same}")
        for e in sorted(set(prober.errors)):
            print(f"  failed probe: {e}")
        return 0 if same and same_daemon and max(windows) < 1.0 and not prober.failures else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
