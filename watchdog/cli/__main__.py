"""`python -m watchdog.cli`: watchdogctl run from a source tree (as scripts/watchdogctl)."""

import gc
import sys

from watchdog.cli import main

code = main()
gc.freeze()  # as scripts/watchdogctl: the collector's passes at shutdown skip what is left
sys.exit(code)
