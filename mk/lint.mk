# Rust lints: clippy on the native crates (all targets, tests included; the filter's host-free
# modules among them) and on the two proxy-wasm crates for their wasm targets, both with
# warnings as errors and `too_many_lines` on (over 80 lines, clippy.toml: a function that needs more
# says why in its doc and allows the lint); rustfmt in check mode (rustfmt.toml); and the structure
# lint (tools/rust_structure.py: no import cycle between the modules of a crate, no non-test .rs
# file over 500 lines), after its self-test shows it catches a planted cycle. Part of `make test`
# (through `lint`).
.PHONY: lint-rust lint-structure
CLIPPY_LINTS := -D warnings -W clippy::too_many_lines

lint-rust: deps lint-structure
	$(CARGO) clippy --locked $(NATIVE) --all-targets -- $(CLIPPY_LINTS)
	$(CARGO) clippy --locked --target $(FILTER_TARGET) -p tailweight-filter -- $(CLIPPY_LINTS)
	$(CARGO) clippy --locked --target wasm32-wasip1 -p tailweight-empty-filter -- $(CLIPPY_LINTS)
	$(CARGO) fmt --all --check

lint-structure: deps
	$(PY) tools/rust_structure.py --self-test
	$(PY) tools/rust_structure.py .
