"""`python -m watchdog.cli`: watchdogctl run from a source tree (as scripts/watchdogctl)."""

import sys

from watchdog.cli import main

sys.exit(main())
