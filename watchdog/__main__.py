"""`python -m watchdog` runs the daemon (SPEC §2)."""

from watchdog.daemon.watchdogd import main

raise SystemExit(main())
