# Line coverage of the sidecar crate (what both shells run between host calls) by its own native
# tests: source-based coverage (rustc -C instrument-coverage with the toolchain's llvm-tools) through
# cargo-llvm-cov, installed into the tool cache if missing; the test host (test support) is left out.
# Prints the per-file table; the HTML report goes to target/coverage/html/index.html. Not part of
# `make test` (an instrumented build of its own).
#   make coverage                       the sidecar crate
#   make coverage COVERAGE_CRATES="-p tailweight-picker -p tailweight-wire"
.PHONY: coverage
COVERAGE_CRATES ?= -p tailweight-sidecar
LLVM_COV_VERSION := 0.9.1

coverage:
	@rustup component list --installed | grep -q '^llvm-tools' || rustup component add llvm-tools
	@[ -x "$(TW_CACHE)/bin/cargo-llvm-cov" ] || command -v cargo-llvm-cov >/dev/null || \
		cargo install cargo-llvm-cov --locked --version $(LLVM_COV_VERSION) --root "$(TW_CACHE)"
	env PATH="$(TW_CACHE)/bin:$$PATH" CARGO_TARGET_DIR=target/coverage \
		cargo llvm-cov $(COVERAGE_CRATES) --summary-only --ignore-filename-regex 'test_host'
	env PATH="$(TW_CACHE)/bin:$$PATH" CARGO_TARGET_DIR=target/coverage \
		cargo llvm-cov report $(COVERAGE_CRATES) --ignore-filename-regex 'test_host' --html --output-dir target/coverage >/dev/null
