# Benchmarks side by side with supervisord (bench/README.md says what each number means).
#
#   make bench          the full run, several minutes; writes bench/results.md
#   make bench-quick    fewer samples, under a minute; writes bench/out/results-quick.md
#   make bench BENCH_ARGS='--only respawn --profile --keep'    one bench, with py-spy attached
#
# Included by the top-level Makefile, which defines BIN, STAMP and FAKE_NVML. Run the full one on
# a quiet machine: every number is a latency or a CPU share on the cores it shares with others.

BENCH_ARGS ?=
BENCH_VENV := bench/out/installed
BENCH_WHEELS := bench/out/wheel
BENCH_INSTALLED := $(BENCH_VENV)/.installed-stamp

.PHONY: bench bench-quick bench-installed bench-ab bench-idle

# watchdogd and watchdogctl are measured as users run them (mk/install.mk): a wheel of this tree,
# installed non-editable into a fresh venv by that venv's own pip. The editable dev install
# starts slower and is not what anyone runs in production. Rebuilt when the package changes.
$(BENCH_INSTALLED): pyproject.toml scripts/watchdogctl $(shell find watchdog -name '*.py')
	rm -rf $(BENCH_VENV) $(BENCH_WHEELS)
	$(BIN)/pip wheel -q --disable-pip-version-check --no-deps -w $(BENCH_WHEELS) .
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --disable-pip-version-check \
		$(BENCH_WHEELS)/train_watchdog-*.whl
	touch $@

bench-installed: $(BENCH_INSTALLED)

bench: $(STAMP) $(FAKE_NVML) $(BENCH_INSTALLED)
	BENCH_INSTALLED_VENV=$(CURDIR)/$(BENCH_VENV) $(BIN)/python -m bench $(BENCH_ARGS)

bench-quick: $(STAMP) $(FAKE_NVML) $(BENCH_INSTALLED)
	BENCH_INSTALLED_VENV=$(CURDIR)/$(BENCH_VENV) $(BIN)/python -m bench --quick $(BENCH_ARGS)

# A/B against another build, interleaved (bench/ab.py): `make bench-ab OLD=<commit or ref>`
# builds that commit's wheel itself (bench/oldbuild.py: git archive, its own venv, cached per
# commit under ~/.cache/train-watchdog-bench), e.g. `make bench-ab OLD="86a5af8 c53acb4"` (several:
# each beside this tree, interleaved); BENCH_OLD=<venv> names a venv built some other way. Writes
# bench/out/ab.md.
OLD ?=
BENCH_OLD ?=
# The shell's $old for bench-ab and bench-idle: BENCH_OLD, then a venv per OLD commit.
OLD_VENVS = test -n "$(OLD)$(BENCH_OLD)" || \
		{ echo "make $@ OLD=<commit> (or BENCH_OLD=<venv>)" >&2; exit 2; }; \
	old="$(BENCH_OLD)"; for ref in $(OLD); do \
		old="$$old $$($(BIN)/python -m bench.oldbuild $$ref)" || exit 1; done
bench-ab: $(STAMP) $(FAKE_NVML) $(BENCH_INSTALLED)
	$(OLD_VENVS); BENCH_INSTALLED_VENV=$(CURDIR)/$(BENCH_VENV) $(BIN)/python -m bench.ab $$old \
		$(CURDIR)/$(BENCH_VENV) $(BENCH_ARGS)

# Idle CPU of old builds and this tree measured at the same time (bench/idle_ab.py): every
# build's daemon runs in the same windows, so the machine's drift falls on all of them, e.g.
# `make bench-idle OLD="81f9e0b 86a5af8" BENCH_ARGS="--rounds 5 --window 120"`. Writes
# bench/out/idle_ab-<rate>.md.
bench-idle: $(STAMP) $(FAKE_NVML) $(BENCH_INSTALLED)
	$(OLD_VENVS); $(BIN)/python -m bench.idle_ab $$old $(CURDIR)/$(BENCH_VENV) $(BENCH_ARGS)
