# Aggregator benchmark: simulated sidecars POST real v1 reports at rising rates (the driver:
# bench/aggregator-loadgen, binary tailweight-loadgen). The aggregator is pinned to core 1 with one
# worker thread ("per core"); the load driver runs on core 0 at low priority. Results: bench/results/aggregator.{json,md}. Shared machine: numbers are noisy; the
# driver also reports the per-report handling cost measured in process CPU time.
.PHONY: bench-aggregator
AGG_BENCH_ARGS ?= --reporters 10000 --endpoints 20 --clusters 500 --rates 5000,10000,20000,30000 --step-secs 5 --connections 32

bench-aggregator:
	$(CARGO) build --locked --release -p tailweight-aggregator -p tailweight-aggregator-loadgen
	@mkdir -p bench/results
	taskset -c 0 nice -n 5 target/release/tailweight-loadgen --aggregator target/release/tailweight-aggregator \
	  --server-cpu 1 $(AGG_BENCH_ARGS) \
	  --json bench/results/aggregator.json --md bench/results/aggregator.md
