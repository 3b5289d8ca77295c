# make install / make uninstall, run as root (see docs/operator-guide.md).
#
#   make install [PREFIX=/opt/train-watchdog] [SYSCONFDIR=/etc/train-watchdog]
#                [UNITDIR=/etc/systemd/system] [WHEELS=dir]   WHEELS: install offline from wheels
#                [LOGROTATEDIR=/etc/logrotate.d]             the job log's rotation (docs/logrotate.md)
#                [EXTRAS=diagnostics]                        EXTRAS= installs the bare daemon
#   make upgrade   [PREFIX=...] [WHEELS=dir]   install the new code into PREFIX, then run it in
#                  place with `watchdogctl reexec` (same daemon pid, the job untouched)
#   make uninstall                                              keeps the config and the state
#   make install-docs [MANDIR=...] [COMPLETIONSDIR=...]   only the man pages and the completion
#                  (make install does this too; the files are committed: nothing is built)
#
# Included by the top-level Makefile; it also works alone: make -f mk/install.mk install

PREFIX ?= /opt/train-watchdog
SYSCONFDIR ?= /etc/train-watchdog
UNITDIR ?= /etc/systemd/system
LOGROTATEDIR ?= /etc/logrotate.d
WHEELS ?=
PYTHON ?= python3
# py-spy (the diagnostics extra) by default: without it every incident bundle of an installed
# daemon says "py-spy not found" and holds no stack. Offline, WHEELS must hold its wheel too.
EXTRAS ?= diagnostics

comma := ,
# The source tree is the folder above this file, wherever make was started from.
INSTALL_SRCDIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)
INSTALL_UNIT := train-watchdog.service
INSTALL_DOCDIR = $(PREFIX)/share/train-watchdog
# The build backend (setuptools, wheel) must be among the wheels too: pip builds the project in
# an isolated environment and finds nothing else offline.
INSTALL_PIP_SOURCE = $(if $(WHEELS),--no-index --find-links $(abspath $(WHEELS)))
INSTALL_TARGET = '$(INSTALL_SRCDIR)$(if $(EXTRAS),[$(EXTRAS)])'

# The man pages go where man finds them without a MANPATH: /usr/local/share/man is on man-db's
# default path. With MANDIR=$(PREFIX)/share/man instead, add it: MANPATH=$(PREFIX)/share/man:
# (the trailing colon keeps the system's pages).
MANDIR ?= /usr/local/share/man
# bash-completion loads completions/<command> when the command is first completed.
COMPLETIONSDIR ?= $(or $(shell pkg-config --variable=completionsdir bash-completion 2>/dev/null),\
	/usr/share/bash-completion/completions)
INSTALL_MANPAGES := man1/watchdogctl.1 man5/watchdog.yaml.5 man8/watchdogd.8

.PHONY: install uninstall upgrade install-docs uninstall-docs

install-docs:
	install -d -m 0755 $(MANDIR)/man1 $(MANDIR)/man5 $(MANDIR)/man8 $(COMPLETIONSDIR)
	$(foreach page,$(INSTALL_MANPAGES),install -m 0644 $(INSTALL_SRCDIR)/man/$(notdir $(page)) \
		$(MANDIR)/$(page) &&) true
	install -m 0644 $(INSTALL_SRCDIR)/completions/watchdogctl.bash $(COMPLETIONSDIR)/watchdogctl
	@case ":$$(manpath 2>/dev/null):" in *":$(MANDIR):"*) ;; \
	*) echo "man pages in $(MANDIR): MANPATH=$(MANDIR): man watchdogd";; esac

uninstall-docs:
	rm -f $(addprefix $(MANDIR)/,$(INSTALL_MANPAGES)) $(COMPLETIONSDIR)/watchdogctl

install: install-docs
	$(PYTHON) -m venv $(PREFIX)
	$(PREFIX)/bin/python -m pip install --disable-pip-version-check $(INSTALL_PIP_SOURCE) \
		$(INSTALL_TARGET)
	$(if $(filter diagnostics,$(subst $(comma), ,$(EXTRAS))),$(PREFIX)/bin/py-spy --version)
	install -d -m 0755 $(UNITDIR) $(INSTALL_DOCDIR)
	sed -e 's|/opt/train-watchdog/bin/watchdogd|$(PREFIX)/bin/watchdogd|' \
		-e 's|/etc/train-watchdog/watchdog.yaml|$(SYSCONFDIR)/watchdog.yaml|' \
		$(INSTALL_SRCDIR)/systemd/$(INSTALL_UNIT) > $(UNITDIR)/$(INSTALL_UNIT).tmp
	chmod 0644 $(UNITDIR)/$(INSTALL_UNIT).tmp
	mv -f $(UNITDIR)/$(INSTALL_UNIT).tmp $(UNITDIR)/$(INSTALL_UNIT)
	install -m 0644 $(INSTALL_SRCDIR)/systemd/hardening.conf $(INSTALL_DOCDIR)/hardening.conf
	@# The daemon refuses a config that anyone but root can write (SPEC §6), hence 0755/0644.
	install -d -m 0755 $(SYSCONFDIR)
	@# Never overwrite an operator's config: only a missing one is created from the example.
	if [ ! -e $(SYSCONFDIR)/watchdog.yaml ]; then \
		install -m 0644 $(INSTALL_SRCDIR)/etc/watchdog.yaml $(SYSCONFDIR)/watchdog.yaml; \
	else \
		echo "keeping existing $(SYSCONFDIR)/watchdog.yaml"; \
	fi
	@# The job log's rotation (docs/logrotate.md): logrotate wants it root-owned, not writable
	@# by others; an operator's edited copy is kept like the config.
	install -d -m 0755 $(LOGROTATEDIR)
	if [ ! -e $(LOGROTATEDIR)/train-watchdog ]; then \
		install -m 0644 $(INSTALL_SRCDIR)/etc/logrotate.d/train-watchdog $(LOGROTATEDIR)/train-watchdog; \
	else \
		echo "keeping existing $(LOGROTATEDIR)/train-watchdog"; \
	fi
	if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

# Install the new code over the existing virtual environment, then hand the running daemon
# over to it in place (SPEC §12). A daemon that is not running just picks up the new code at its
# next start; a new code that fails its check is refused and the old one keeps running.
UPGRADE_SOCKET ?= /run/train-watchdog/control.sock

upgrade:
	@test -x $(PREFIX)/bin/watchdogd || { echo "no install in $(PREFIX): run make install" >&2; exit 1; }
	$(PREFIX)/bin/python -m pip install --disable-pip-version-check $(INSTALL_PIP_SOURCE) \
		$(INSTALL_TARGET)
	if [ -S $(UPGRADE_SOCKET) ]; then $(PREFIX)/bin/watchdogctl --socket $(UPGRADE_SOCKET) reexec; \
	else echo "watchdogd is not running: the new code runs at its next start"; fi

# Removes what install added; the config ($(SYSCONFDIR)) and the state (/var/lib/train-watchdog)
# stay. A running service is stopped first: its program is about to disappear.
uninstall: uninstall-docs
	@# rm -rf only what is recognisably our virtual environment (PREFIX= or PREFIX=/ would be fatal).
	@if [ -e "$(PREFIX)" ] && ! { [ -f "$(PREFIX)/pyvenv.cfg" ] && [ -e "$(PREFIX)/bin/watchdogd" ]; }; \
	then \
		echo "$(PREFIX) is not a train-watchdog virtual environment; not removing it" >&2; exit 1; \
	fi
	if [ -d /run/systemd/system ] && [ -e "$(UNITDIR)/$(INSTALL_UNIT)" ]; then \
		systemctl disable --now $(INSTALL_UNIT); \
	fi
	rm -f "$(UNITDIR)/$(INSTALL_UNIT)"
	@# The logrotate snippet goes only as shipped; an edited one is the operator's, like the config.
	if cmp -s $(INSTALL_SRCDIR)/etc/logrotate.d/train-watchdog $(LOGROTATEDIR)/train-watchdog; then \
		rm -f $(LOGROTATEDIR)/train-watchdog; \
	fi
	rm -rf "$(PREFIX)"
	if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
