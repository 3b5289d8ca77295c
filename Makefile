# train-watchdog — `make demo` runs the daemon on a demo job over 8 simulated GPUs;
# `make test` runs every test. Both set up what they need themselves (.venv, the C stand-in).
#
#   make test        every test, TEST_WORKERS at a time (pytest-xdist), the slowest 10 listed
#   make test-fast   the same without the `slow` ones (a Slurm cluster, the HF Trainer, Lightning, torchrun)
#   make check       lint and the pure tests (they start no process): under a minute
#   make test TEST_WORKERS=0    one at a time, as before; PYTEST_ARGS='-k name' narrows any of them
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two stamps: the demo sets up only what it runs (the package and its runtime dependencies);
# test and lint add the dev and test extras, torch included, on top of that.
BASE_STAMP := $(VENV)/.base-stamp
STAMP := $(VENV)/.installed-stamp
FAKE_NVML := tests/fake_nvml/build/libnvidia-ml.so.1
FAKE_CLOCK := tests/fake_clock/build/libfakeclock.so
DEMO := $(CURDIR)/.demo

.PHONY: all demo demo-reset test test-fast check lint fmt fake-nvml fake-clock venv clean docs man

all: test

# TORCH_PIP_ARGS: extra pip options for the torch extra (e.g. an index of CPU-only builds).
TORCH_PIP_ARGS ?=

# The editable install as a path (a .pth naming this folder: setuptools' `compat` mode), not
# setuptools' default import hook, whose module imports pathlib, importlib.util and fnmatch at
# every Python start in the venv (~12 ms of CPU): every watchdogctl (which imports none of them),
# job script and daemon the tests start paid it, 8-10 % of the CPU of test_timeline, test_control
# and test_persist (2026-12-06). Where the build backend has lost that deprecated mode, the default.
# $(call EDITABLE,PIP OPTIONS,TARGET)
EDITABLE = $(BIN)/pip install -q $(1) -e '$(2)' --config-settings editable_mode=compat || \
	$(BIN)/pip install -q $(1) -e '$(2)'
DEV_EXTRAS := .[dev,diagnostics,metrics,cluster,notify]
TORCH_EXTRAS := .[torch,frameworks]

$(BASE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(call EDITABLE,,.)
	touch $@

$(STAMP): $(BASE_STAMP)
	$(call EDITABLE,,$(DEV_EXTRAS))
	@# The torchrun and framework tests need torch (and transformers, lightning); where they cannot be installed they skip and say why.
	{ $(call EDITABLE,$(TORCH_PIP_ARGS),$(TORCH_EXTRAS)); } || \
		echo "torch or the frameworks extra could not be installed: tests/test_torchrun.py and tests/test_frameworks.py will skip, saying why" >&2
	touch $@

venv: $(STAMP)

$(FAKE_NVML): tests/fake_nvml/fake_nvml.c tests/fake_nvml/Makefile
	$(MAKE) -s -C tests/fake_nvml

fake-nvml: $(FAKE_NVML)

# The wall-clock shim (tests/fake_clock): a daemon whose clock alone is stepped.
$(FAKE_CLOCK): tests/fake_clock/fake_clock.c tests/fake_clock/Makefile
	$(MAKE) -s -C tests/fake_clock

fake-clock: $(FAKE_CLOCK)

# Every `make demo` starts fresh: the last one's state (a job parked in fatal, say), its run
# counter, log and GPUs are removed first, so the demo shows the same story each time.
demo: $(BASE_STAMP) $(FAKE_NVML)
	$(MAKE) --no-print-directory demo-reset
	mkdir -p $(DEMO)
	$(BIN)/python tests/support/fakegpu.py gpus -n 8 $(DEMO)/gpus >/dev/null
	FAKE_NVML_DIR=$(DEMO)/gpus LD_LIBRARY_PATH=$(CURDIR)/tests/fake_nvml/build \
		$(BIN)/watchdogd --config etc/demo.yaml

demo-reset:
	rm -rf $(DEMO)/state $(DEMO)/gpus $(DEMO)/demo_runs $(DEMO)/job.log

# docs/config.md, the man pages (man/) and watchdogctl's completion (completions/) are made from
# the code (python -m watchdog.docgen) and committed; tests/test_docs.py says when to run this.
docs: $(BASE_STAMP)
	$(BIN)/python -m watchdog.docgen

man: docs

# Most tests wait on real processes, so four times as many workers as cores pays (up to 8, as on
# the 2-core machines the suite is timed on: docs/testing.md). --dist loadgroup keeps each module of
# tests/tiers.py GROUPS on one worker. Exit 5 (no test ran) and a crashed worker fail the run.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$((n * 4 > 8 ? 8 : n * 4)))
PYTEST_ARGS ?=
PYTEST_RUN = $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=10
# The tree byte-compiled once before a run: where PYTHONDONTWRITEBYTECODE is set no process writes
# its .pyc, so every daemon and watchdogctl the tests start compiled the package from source
# again (0.40 s of CPU to import watchdogd instead of 0.22: ~60 s of CPU over ~330 daemon starts).
# The same holds for the test modules as pytest rewrites their asserts: each of the 6 workers
# rewrote all ~175 of them again (7 s of CPU a worker, 2026-12-06). One collection with writing
# allowed leaves pytest's own cached copies (__pycache__/*-pytest-*.pyc), which the workers read
# even where they may not write; a collection error shows in the run itself.
# The daemon's dataclasses are compiled once too (watchdog/daemon/codecache.py: ~1/3 of a
# watchdogd start's import), by one import of the daemon with writing allowed.
COMPILE = $(BIN)/python -m compileall -q watchdog tests/support bench && \
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -c "import watchdog.daemon.watchdogd" && \
	{ PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --collect-only -q -p no:cacheprovider >/dev/null || true; }

test: $(STAMP) $(FAKE_NVML) $(FAKE_CLOCK)
	$(COMPILE)
	$(PYTEST_RUN) $(PYTEST_ARGS)

test-fast: $(STAMP) $(FAKE_NVML) $(FAKE_CLOCK)
	$(COMPILE)
	$(PYTEST_RUN) -m "not slow" $(PYTEST_ARGS)

check: lint
	$(BIN)/python -m pytest -q -m pure $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check watchdog tests bench
	$(BIN)/ruff format --check watchdog tests bench
	$(BIN)/mypy --strict watchdog bench

fmt: $(STAMP)
	$(BIN)/ruff format watchdog tests bench
	$(BIN)/ruff check --fix watchdog tests bench

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache
	$(MAKE) -s -C tests/fake_nvml clean
	$(MAKE) -s -C tests/fake_clock clean

-include mk/install.mk
-include mk/bench.mk
