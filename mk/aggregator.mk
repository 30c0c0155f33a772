# Aggregator benchmark: simulated sidecars POST real v1 reports at rising rates (the driver:
# bench/aggregator-loadgen, binary tailweight-loadgen). The aggregator is pinned to core 1 with one
# worker thread ("per core"); the load driver runs on core 0 at low priority. Results: bench/results/aggregator.{json,md}. Shared machine: numbers are noisy; the
# driver also reports the per-report handling cost measured in process CPU time. 10,000 x 20
# observations are more than the Deployment's memory budget holds (docs/weights.md, "Memory"): the
# aggregator gets a larger one here, this being a measure of throughput.
.PHONY: bench-aggregator bench-hostile bench-memory bench-attest-fill
AGG_BENCH_ARGS ?= --reporters 10000 --endpoints 20 --clusters 500 --rates 5000,10000,20000,30000 --step-secs 5 --connections 32 \
  --server-arg=--identity=report --server-arg=--memory-limit-mib=512

bench-aggregator:
	$(CARGO) build --locked --release -p tailweight-aggregator -p tailweight-aggregator-loadgen
	@mkdir -p bench/results
	taskset -c 0 nice -n 5 target/release/tailweight-loadgen --aggregator target/release/tailweight-aggregator \
	  --server-cpu 1 $(AGG_BENCH_ARGS) \
	  --json bench/results/aggregator.json --md bench/results/aggregator.md

# The aggregator under attack (bench/aggregator-loadgen/src/hostile.rs): 10,000 honest reporters
# report 10,000 times a second over 20 principals; after a 25 s baseline, for 40 s, lying principals
# with invented reporter ids, maximal reports, identity churn, garbage and truncated bodies, reports
# without identity and slowloris connections, all at once. Prints the honest reports accepted and
# their p99, the aggregator's RSS against the pod's 256 MiB, and how far the attackers moved the
# weights. Then, on a fresh aggregator, principals that never call a service against 1, 2 and 20 real
# callers, with and without attestations (src/callers.rs; its table is appended to hostile.md).
# Same pinning as bench-aggregator; about 2.5 minutes. Then the worst bodies
# (bench/aggregator-loadgen/src/bodies.rs): a fresh aggregator per body and budget (192 and 128 MiB),
# 3 rounds of 8 concurrent 512 KiB bodies from two principals, its peak RSS against the budget;
# about 1 minute, its section of hostile.md replaced. Before them, trickling and polling
# (bench/aggregator-loadgen/src/hostile/fair.rs; issue 24 item 3): on a fresh aggregator per run
# (2 runs), honest reports at 2,000/s (a fifth of the run above, whose 4.8 ms baseline p99 leaves
# no room under the 5 ms target), then 8 attacker principals trickling 512 KiB bodies just above
# and below --min-body-rate on 8 connections each and polling the largest weights page on 2 each,
# then polling alone; about 2 minutes, its section of hostile.md and the key trickling_and_polling
# of hostile.json replaced. Then made-up endpoints, attestation fill (its baseline without attackers, then by one principal, then by four),
# and three clients scraping /metrics back to back (bench/aggregator-loadgen/src/hostile/evidence.rs;
# issue 38's targets): a fresh aggregator each, the musl static build (the image's) when its target is
# installed, beside honest reports at 2,000/s; about 2.5 minutes, its section of hostile.md and the key
# evidence_attacks of hostile.json replaced. Results: bench/results/hostile{,-bodies}.{json,md}.
HOSTILE_ARGS ?= --reporters 10000 --endpoints 6 --clusters 500 --principals 20 --connections 32 \
  --honest-rate 10000 --baseline-secs 25 --attack-secs 40 --attacked-clusters 50 --liar-ids 8 --slowloris 128
FAIR_ARGS ?= --reporters 10000 --endpoints 6 --clusters 500 --principals 20 --connections 32 \
  --honest-rate 2000 --baseline-secs 15 --attack-secs 20 --attackers 8 --trickle-connections 8 --poll-connections 2 \
  --min-body-rate 65536 --runs 2
EVIDENCE_ARGS ?= --reporters 10000 --endpoints 6 --clusters 500 --principals 20 --connections 32 \
  --honest-rate 2000 --attack-secs 20

bench-hostile:
	$(CARGO) build --locked --release -p tailweight-aggregator -p tailweight-aggregator-loadgen
	@mkdir -p bench/results
	timeout 600 taskset -c 0 nice -n 5 target/release/tailweight-loadgen --aggregator target/release/tailweight-aggregator \
	  --server-cpu 1 --hostile $(HOSTILE_ARGS) --inprocess-reports 0 \
	  --server-arg=--identity=header:x-tailweight-principal --server-arg=--memory-limit-mib=192 \
	  --json bench/results/hostile.json --md bench/results/hostile.md
	timeout 300 taskset -c 0 nice -n 5 target/release/tailweight-loadgen --aggregator target/release/tailweight-aggregator \
	  --server-cpu 1 --callers-matrix --inprocess-reports 0 \
	  --server-arg=--identity=header:x-tailweight-principal --server-arg=--memory-limit-mib=192 \
	  --md bench/results/hostile.md
	timeout 600 taskset -c 0 nice -n 5 target/release/tailweight-loadgen --aggregator target/release/tailweight-aggregator \
	  --server-cpu 1 --trickle-poll $(FAIR_ARGS) --inprocess-reports 0 \
	  --server-arg=--identity=header:x-tailweight-principal --server-arg=--memory-limit-mib=192 \
	  --server-arg=--min-body-rate=65536 \
	  --json bench/results/hostile.json --md bench/results/hostile.md
	agg=target/release/tailweight-aggregator; \
	if rustup target list --installed 2>/dev/null | grep -qx $(MUSL_TARGET) && \
	  $(CARGO) build --locked --release --target $(MUSL_TARGET) -p tailweight-aggregator; then agg=$(AGGREGATOR_STATIC); fi; \
	timeout 600 taskset -c 0 nice -n 5 target/release/tailweight-loadgen --aggregator $$agg \
	  --server-cpu 1 --evidence-attacks $(EVIDENCE_ARGS) --inprocess-reports 0 \
	  --server-arg=--identity=header:x-tailweight-principal --server-arg=--memory-limit-mib=192 \
	  --json bench/results/hostile.json --md bench/results/hostile.md
	timeout 600 taskset -c 0 nice -n 5 target/release/tailweight-loadgen --aggregator target/release/tailweight-aggregator \
	  --server-cpu 1 --worst-bodies --memory-limits-mib 192,128 --body-rounds 3 \
	  --json bench/results/hostile-bodies.json --md bench/results/hostile.md

# Only the attestation fill rows of bench-hostile's evidence section: the same driver without
# attackers (the baseline: what it sends in time on this machine), then 1 and 4 attesting principals,
# each on a fresh aggregator (musl build when its target is installed); the honest reports' sent of
# due and accepted of sent apart. About 1.5 minutes; replaces those rows of hostile.md and the key
# attest_fill of hostile.json.
# 500 honest reports/s: what the driver sends in full on this shared 2-core machine (at 2,000/s it
# fell short even without attackers), so that accepted of sent is the aggregator's own.
FILL_ARGS ?= --reporters 10000 --endpoints 6 --clusters 500 --principals 20 --connections 32 \
  --honest-rate 500 --attack-secs 20
bench-attest-fill:
	$(CARGO) build --locked --release -p tailweight-aggregator -p tailweight-aggregator-loadgen
	agg=target/release/tailweight-aggregator; \
	if rustup target list --installed 2>/dev/null | grep -qx $(MUSL_TARGET) && \
	  $(CARGO) build --locked --release --target $(MUSL_TARGET) -p tailweight-aggregator; then agg=$(AGGREGATOR_STATIC); fi; \
	timeout 600 taskset -c 0 nice -n 5 target/release/tailweight-loadgen --aggregator $$agg \
	  --server-cpu 1 --evidence-attacks --attest-fill-only $(FILL_ARGS) --inprocess-reports 0 \
	  --server-arg=--identity=header:x-tailweight-principal --server-arg=--memory-limit-mib=192 \
	  --json bench/results/hostile.json --md bench/results/hostile.md

# Bytes the weight book holds per unit, measured with a counting allocator (the figures
# weights/src/memory.rs is built on; weights/tests/memory.rs, an ignored test).
bench-memory:
	nice $(CARGO) test --locked --release -p tailweight-weights --test memory -- --ignored --nocapture measure_bytes_per_unit
