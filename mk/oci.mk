# Release artefacts for Istio (see docs/istio.md): the filter as a Wasm OCI image, the aggregator as
# a static binary and as a container image of that binary (no Docker engine needed for either).
.PHONY: oci-wasm musl-target aggregator-static image-aggregator

TW_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# oras from the Go module proxy, pinned; it assembles the OCI image (scripts/pack-wasm-oci.sh).
ORAS_VERSION := v1.3.6
ORAS := $(TW_CACHE)/bin/oras-$(ORAS_VERSION)
OCI_LAYOUT := $(BUILD)/oci/tailweight-filter
MUSL_TARGET := x86_64-unknown-linux-musl
AGGREGATOR_STATIC := target/$(MUSL_TARGET)/release/tailweight-aggregator
AGGREGATOR_LAYOUT := $(BUILD)/oci/tailweight-aggregator
AGGREGATOR_IMAGE := $(BUILD)/oci/tailweight-aggregator-$(TW_VERSION).tar

$(ORAS):
	@mkdir -p $(TW_CACHE)/bin
	tmp=$$(mktemp -d) && GOBIN=$$tmp GOFLAGS= go install oras.land/oras/cmd/oras@$(ORAS_VERSION) \
		&& mv $$tmp/oras $@ && rmdir $$tmp

# $(BUILD)/oci/tailweight-filter: an OCI image layout holding tailweight-filter:$(TW_VERSION). Push it:
#   $(ORAS) cp --from-oci-layout $(OCI_LAYOUT):$(TW_VERSION) <registry>/tailweight-filter:$(TW_VERSION)
oci-wasm: wasm $(ORAS)
	bash scripts/pack-wasm-oci.sh $(ORAS) $(WASM) $(OCI_LAYOUT) $(TW_VERSION)

# The Rust target of the static builds.
musl-target: deps
	@rustup target list --installed | grep -qx $(MUSL_TARGET) || rustup target add $(MUSL_TARGET)

# The aggregator linked statically (musl): `ldd` must find nothing to load.
aggregator-static: musl-target
	$(CARGO) build --locked --release --target $(MUSL_TARGET) -p tailweight-aggregator
	@if ldd $(AGGREGATOR_STATIC) 2>&1 | grep -q '=>'; then \
		echo "$(AGGREGATOR_STATIC) is dynamically linked:"; ldd $(AGGREGATOR_STATIC); exit 1; fi
	@echo "$(AGGREGATOR_STATIC): static ($$(ldd $(AGGREGATOR_STATIC) 2>&1 | tr -d '\t'))"

# The aggregator's container image, static and non-root, assembled from $(AGGREGATOR_STATIC) by
# scripts/pack-aggregator-oci.sh (no Docker engine): the OCI layout $(AGGREGATOR_LAYOUT) and its tar
# $(AGGREGATOR_IMAGE) (an OCI archive: `docker load -i`, `ctr images import`), or push it:
#   $(ORAS) cp --from-oci-layout $(AGGREGATOR_LAYOUT):$(TW_VERSION) <registry>/tailweight-aggregator:$(TW_VERSION)
# e2e/tests/test_aggregator_image.py packs it again and checks its user, entrypoint and binary.
image-aggregator: aggregator-static $(ORAS)
	bash scripts/pack-aggregator-oci.sh $(ORAS) $(AGGREGATOR_STATIC) $(AGGREGATOR_LAYOUT) $(TW_VERSION) $(AGGREGATOR_IMAGE)

test-e2e: image-aggregator
