# Simulator (sim/): seed scenario, load sweep with plot, the 1,000 x 1,000 measure, speed.
# Results go to bench/results/sim-*; long runs are niced (2 shared cores).
.PHONY: sim sim-seed sim-sweep sim-measure sim-validate bench-sim

SIM := target/release/tailweight-sim
SIM_RESULTS := bench/results
SIM_1000 := sim/scenarios/seed-fib-1000.yaml
SIM_THREADS ?= 1

sim:
	$(CARGO) build --locked --release -p tailweight-sim

# The seed scenario as the file says (1,000 clients), and at the benchmark's own scale (4 Fortio
# clients with 16 connections each) for the comparison with the real benchmark.
sim-seed: sim
	nice $(SIM) run e2e/scenarios/seed-fib.yaml --threads $(SIM_THREADS) --out $(SIM_RESULTS)/sim-seed
	nice $(SIM) run e2e/scenarios/seed-fib.yaml --clients 4 --connection-limit --cswrr-periods 1,0.5 \
	  --threads $(SIM_THREADS) --out $(SIM_RESULTS)/sim-seed-small

# p99 vs load (50%..95% of capacity) per policy, plotted as PNG. Default: the seed mix x 10
# (150 endpoints) and 150 clients, so every policy and point fits in minutes; SWEEP_ARGS to change.
SWEEP_LOADS ?= 0.5,0.6,0.7,0.8,0.9,0.95
SWEEP_ARGS ?= --endpoints 150 --clients 150 --warmup-s 10 --duration-s 30
sim-sweep: sim deps
	nice $(SIM) sweep $(SIM_1000) --loads $(SWEEP_LOADS) $(SWEEP_ARGS) --threads $(SIM_THREADS) --out $(SIM_RESULTS)/sim-sweep
	$(PY) sim/plot.py $(SIM_RESULTS)/sim-sweep/sweep.json $(SIM_RESULTS)/sim-sweep/p99-vs-load.png

# The closing measure: every policy and the ideal bound at 70% and 90% load.
sim-measure: sim
	nice $(SIM) run $(SIM_1000) --load-factor 0.7 --threads $(SIM_THREADS) --out $(SIM_RESULTS)/sim-measure-70
	nice $(SIM) run $(SIM_1000) --load-factor 0.9 --threads $(SIM_THREADS) --out $(SIM_RESULTS)/sim-measure-90

# Simulated requests per second on one core: 1,000 x 1,000 at 70% load, 10 minutes simulated, the
# simple policies (the others' figures are in each run's results.json: requests_per_cpu_s).
SPEED_POLICIES ?= round_robin,least_request,ideal
bench-sim: sim
	nice $(SIM) speed $(SIM_1000) --policies $(SPEED_POLICIES) --warmup-s 0 --duration-s 600 --out $(SIM_RESULTS)

# Side by side with the real benchmark (bench/results/seed-fib/results.json) into sim/README.md.
sim-validate: deps
	$(PY) sim/validate.py $(SIM_RESULTS)/sim-seed-small/results.json $(SIM_RESULTS)/seed-fib/results.json --readme sim/README.md
