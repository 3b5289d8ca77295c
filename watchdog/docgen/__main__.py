"""`python -m watchdog.docgen`: see watchdog.docgen."""

import sys

from watchdog.docgen import main

raise SystemExit(main(sys.argv[1:]))
