"""The detection bench's job: does nothing and never exits by itself.

The bench plays the job's part from outside: it makes the job hold simulated GPU memory (a
procs/<pid> file of the NVML stand-in), writes its progress lines, and frees or stops them to
inject a fault, so each fault's time is known exactly. Standard library only.
"""

import signal

while True:
    signal.pause()
