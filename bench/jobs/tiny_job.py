"""The respawn bench's job: stamp the start, wait for a token, live briefly, stamp the death, die.

    python -I -S tiny_job.py STAMPS FIFO LIFE_MS JITTER_MS   one life of a crash loop
    python -I -S tiny_job.py STAMPS --baseline               start, live 20 ms, die (exit 0)

STAMPS gets "S <CLOCK_MONOTONIC ns> <pid>" as the first thing the script does and
"D <ns> <pid>" just before os._exit(1); one os.write() per line to an O_APPEND file, so lines
never interleave. FIFO hands out one byte per allowed death: the bench runs one supervisor's job
at a time (the others' jobs wait here, alive) and stops the loop by granting no more. EOF (the
bench is gone) ends the job quietly. Standard library only; no `random`, it slows the start.
"""

import os
import sys
import time

started = time.monotonic_ns()
stamps = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(stamps, b"S %d %d\n" % (started, os.getpid()))
if sys.argv[2] == "--baseline":  # no supervisor: the bench watches this one itself
    time.sleep(0.02)
    os.write(stamps, b"D %d %d\n" % (time.monotonic_ns(), os.getpid()))
    os._exit(0)
gate = os.open(sys.argv[2], os.O_RDONLY)
if os.read(gate, 1) == b"":
    os._exit(0)
# A random life moves each death to a random phase of the supervisors' own timers.
life_ms = int(sys.argv[3]) + int.from_bytes(os.urandom(2), "little") % (int(sys.argv[4]) + 1)
time.sleep(life_ms / 1000)
os.write(stamps, b"D %d %d\n" % (time.monotonic_ns(), os.getpid()))
os._exit(1)
