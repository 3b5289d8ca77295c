"""`python -m watchdog.cli`: watchdogctl run from a source tree."""

import sys

from watchdog.cli.commands import main

sys.exit(main())
