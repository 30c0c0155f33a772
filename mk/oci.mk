# Release artefacts for Istio (see docs/istio.md): the filter as a Wasm OCI image, the aggregator as
# a static binary (what aggregator/Dockerfile ships; no Docker engine needed to check it).
.PHONY: oci-wasm aggregator-static

TW_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# oras from the Go module proxy, pinned; it assembles the OCI image (scripts/pack-wasm-oci.sh).
ORAS_VERSION := v1.3.6
ORAS := $(TW_CACHE)/bin/oras-$(ORAS_VERSION)
OCI_LAYOUT := $(BUILD)/oci/tailweight-filter
MUSL_TARGET := x86_64-unknown-linux-musl
AGGREGATOR_STATIC := target/$(MUSL_TARGET)/release/tailweight-aggregator

$(ORAS):
	@mkdir -p $(TW_CACHE)/bin
	tmp=$$(mktemp -d) && GOBIN=$$tmp GOFLAGS= go install oras.land/oras/cmd/oras@$(ORAS_VERSION) \
		&& mv $$tmp/oras $@ && rmdir $$tmp

# $(BUILD)/oci/tailweight-filter: an OCI image layout holding tailweight-filter:$(TW_VERSION). Push it:
#   $(ORAS) cp --from-oci-layout $(OCI_LAYOUT):$(TW_VERSION) <registry>/tailweight-filter:$(TW_VERSION)
oci-wasm: wasm $(ORAS)
	bash scripts/pack-wasm-oci.sh $(ORAS) $(WASM) $(OCI_LAYOUT) $(TW_VERSION)

# The aggregator linked statically (musl): `ldd` must find nothing to load.
aggregator-static: deps
	@rustup target list --installed | grep -qx $(MUSL_TARGET) || rustup target add $(MUSL_TARGET)
	$(CARGO) build --locked --release --target $(MUSL_TARGET) -p tailweight-aggregator
	@if ldd $(AGGREGATOR_STATIC) 2>&1 | grep -q '=>'; then \
		echo "$(AGGREGATOR_STATIC) is dynamically linked:"; ldd $(AGGREGATOR_STATIC); exit 1; fi
	@echo "$(AGGREGATOR_STATIC): static ($$(ldd $(AGGREGATOR_STATIC) 2>&1 | tr -d '\t'))"
