"""Python's start-up where this runs: spawns tiny_job.py --baseline N times (spawn call → the
job's first stamp) and prints the N times in ms as a JSON list. Used inside the systemd
container, whose Python is not the bench's. Standard library only.

    python -I -S spawn_baseline.py STAMPS N        (tiny_job.py lies next to this script)
"""

import json
import os
import subprocess
import sys
import time

job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_job.py")
stamps, n = sys.argv[1], int(sys.argv[2])
out = []
for _ in range(n):
    before = time.monotonic_ns()
    subprocess.run([sys.executable, "-I", "-S", job, stamps, "--baseline"], check=True)
    with open(stamps, "rb") as f:
        start = [line for line in f.read().splitlines() if line.startswith(b"S ")][-1]
    out.append((int(start.split()[1]) - before) / 1e6)
print(json.dumps(out))
