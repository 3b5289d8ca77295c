# Benchmarks side by side with supervisord (bench/README.md says what each number means).
#
#   make bench          the full run, several minutes; writes bench/results.md
#   make bench-quick    fewer samples, under a minute; writes bench/out/results-quick.md
#   make bench BENCH_ARGS='--only respawn --profile --keep'    one bench, with py-spy attached
#
# Included by the top-level Makefile, which defines BIN, STAMP and FAKE_NVML. Run the full one on
# a quiet machine: every number is a latency or a CPU share on the cores it shares with others.

BENCH_ARGS ?=

.PHONY: bench bench-quick

bench: $(STAMP) $(FAKE_NVML)
	$(BIN)/python -m bench $(BENCH_ARGS)

bench-quick: $(STAMP) $(FAKE_NVML)
	$(BIN)/python -m bench --quick $(BENCH_ARGS)
