# Benchmarks on real processes (emulated backends, client Envoys, Fortio, aggregator, Prometheus).
#   make bench SCENARIO=e2e/scenarios/slowdown.yaml   every policy of the scenario, full length
#   make demo                                         a short seed run (<= 5 min) for newcomers
# Scenarios (e2e/scenarios, docs/scenario.md): seed-fib, slowdown, rollout (rolling update: steady vs
# rollout p99), comeback (fast backends away 20 s: settle time), grpc-seed, grpc-sinkhole (a backend
# answering UNAVAILABLE, each policy with and without Istio's retries). BENCH_ARGS="--retries off"
# runs the client Envoys without Istio's retry policy.
# Results: bench/results/<scenario name>/{results.json,results.md,*.png}; logs, configs, Fortio JSON
# and per-Envoy /stats under bench/runs/<scenario name>/<policy>/.
.PHONY: bench demo emulator

SCENARIO ?= e2e/scenarios/seed-fib.yaml
BENCH_ARGS ?=
DEMO_OUT ?= bench/results/demo

emulator:
	$(CARGO) build --locked --release -p tailweight-emulator

# The tailweight policies need the filter and the aggregator: `build` makes both (and the emulator).
bench: deps build
	PYTHONPATH=e2e nice $(PY) -m harness --scenario $(SCENARIO) $(BENCH_ARGS)

# Short seed run: 10 s warm-up + 25 s recorded per policy: the seed's six policies and the native
# shell (~5 min with start-up).
DEMO_POLICIES := round_robin,least_request,cswrr_orca,operator,tailweight_local,tailweight,tailweight_native
demo: deps build
	PYTHONPATH=e2e nice $(PY) -m harness --scenario e2e/scenarios/seed-fib.yaml --policies $(DEMO_POLICIES) \
	  --warmup 10 --duration 25 --out $(DEMO_OUT) --logs bench/runs/demo $(BENCH_ARGS)
