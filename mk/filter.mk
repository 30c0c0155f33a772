# The filter's own benchmark and example.
EMPTY_WASM := $(BUILD)/empty_filter.wasm

.PHONY: empty-wasm bench-overhead standalone
empty-wasm: deps
	$(CARGO) build --locked --profile wasm-release --target wasm32-wasip1 -p tailweight-empty-filter
	@mkdir -p $(BUILD)
	$(WASM_OPT) target/wasm32-wasip1/wasm-release/tailweight_empty_filter.wasm -o $(EMPTY_WASM)

# Envoy CPU per request and latency: no wasm vs empty wasm vs tailweight (bench/results/overhead.*).
bench-overhead: build empty-wasm
	PYTHONPATH=e2e nice $(PY) -m bench.overhead --out bench/results

# examples/standalone: Envoy + tailweight in front of three local backends, 20 s of load.
standalone: wasm native
	bash examples/standalone/run.sh
