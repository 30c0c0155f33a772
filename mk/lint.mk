# Rust lints: clippy on the native crates (all targets, tests included; the filter's host-free
# modules among them) and on the two proxy-wasm crates for their wasm32-wasip1 target, both with
# warnings as errors; rustfmt in check mode (rustfmt.toml). Part of `make test` (through `lint`).
.PHONY: lint-rust

lint-rust: deps
	$(CARGO) clippy --locked $(NATIVE) --all-targets -- -D warnings
	$(CARGO) clippy --locked --target wasm32-wasip1 -p tailweight-filter -p tailweight-empty-filter -- -D warnings
	$(CARGO) fmt --all --check
