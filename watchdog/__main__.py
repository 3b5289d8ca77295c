"""`python -m watchdog` runs the daemon (SPEC §2)."""

from watchdog.daemon.loop import main

raise SystemExit(main())
