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

.PHONY: bench bench-quick bench-installed bench-ab

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

# A/B against another build, interleaved (bench/ab.py): BENCH_OLD is a venv holding the other
# build's wheel, e.g. `git worktree add /tmp/old <commit> && make -C /tmp/old bench-installed`,
# then `make bench-ab BENCH_OLD=/tmp/old/bench/out/installed`. Writes bench/out/ab.md.
BENCH_OLD ?=
bench-ab: $(STAMP) $(FAKE_NVML) $(BENCH_INSTALLED)
	@test -n "$(BENCH_OLD)" || { echo "make bench-ab BENCH_OLD=<venv of the other build>" >&2; exit 2; }
	BENCH_INSTALLED_VENV=$(CURDIR)/$(BENCH_VENV) $(BIN)/python -m bench.ab $(BENCH_OLD) \
		$(CURDIR)/$(BENCH_VENV) $(BENCH_ARGS)
