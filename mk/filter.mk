# The filter's own benchmark and example.
EMPTY_WASM := $(BUILD)/empty_filter.wasm
FLOOR_WASM := $(BUILD)/floor_filter.wasm

.PHONY: empty-wasm floor-wasm bench-overhead standalone
empty-wasm: deps
	$(CARGO) build --locked --profile wasm-release --target wasm32-wasip1 -p tailweight-empty-filter
	@mkdir -p $(BUILD)
	$(WASM_OPT) target/wasm32-wasip1/wasm-release/tailweight_empty_filter.wasm -o $(EMPTY_WASM)

# The least a steering Wasm filter pays per request (hand-written text format, binaryen's assembler).
floor-wasm: deps
	@mkdir -p $(BUILD)
	wasm-as bench/wasm-probes/floor.wat -o $(FLOOR_WASM)

# What the filter costs a fleet: start-up, memory (idle and at 64 clusters x 1,000 endpoints), CPU per
# request (HTTP/1.1 and gRPC, concurrency 1 and 2) and light load, no wasm vs the empty V8 filter vs
# tailweight (bench/results/overhead.*, 30-40 min). ARGS: --quick (a two-minute smoke run into
# build/bench-overhead-quick), --variant NAME=path.wasm, --flat-minutes N, --rounds N... (see --help).
bench-overhead: build empty-wasm floor-wasm
	PYTHONPATH=e2e nice $(PY) -m harness.overhead $(ARGS)

# examples/standalone: Envoy + tailweight in front of three local backends, 20 s of load.
standalone: wasm native
	bash examples/standalone/run.sh

# Where the filter module's bytes go (sections, code by Rust module): the shipped module's code,
# optimised again with its names kept (wasm-opt -g), read by tools/wasm_size.py into
# bench/results/wasm-size.md.
.PHONY: wasm-size
wasm-size: wasm
	$(WASM_OPT) -g target/$(FILTER_TARGET)/wasm-release/tailweight_filter.wasm -o $(BUILD)/tailweight_filter.named.wasm
	python3 tools/wasm_size.py $(BUILD)/tailweight_filter.named.wasm --shipped $(WASM) --top 25 > bench/results/wasm-size.md
	@sed -n 3,4p bench/results/wasm-size.md
