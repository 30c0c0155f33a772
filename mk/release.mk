# `make release`: every artifact a user installs, with the workspace version (TW_VERSION), into
# $(BUILD)/release/<version>/ with their SHA256SUMS (scripts/release.sh checks each carries the
# version): the filter's Wasm OCI image and the aggregator's container image (OCI layout tars),
# the Helm chart archive and the static CLI. e2e/istio/test_release.py checks the result.
.PHONY: release cli-static

RELEASE_DIR := $(BUILD)/release/$(TW_VERSION)
CLI_STATIC := target/$(MUSL_TARGET)/release/tailweight

# The CLI linked statically (musl), so that one binary runs on any x86-64 Linux.
cli-static: musl-target
	$(CARGO) build --locked --release --target $(MUSL_TARGET) -p tailweight-cli

release: oci-wasm image-aggregator chart-package cli-static
	bash scripts/release.sh $(TW_VERSION) $(RELEASE_DIR) $(OCI_LAYOUT) $(AGGREGATOR_LAYOUT) \
		$(BUILD)/charts/tailweight-$(TW_VERSION).tgz $(CLI_STATIC) $(MUSL_TARGET)
