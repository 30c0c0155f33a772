# A real node on this machine (issue 40): Debian's containerd + runc + CNI plugins, the kubelet built
# from the pinned k8s.io/kubernetes module (e2e/istio/build/build.sh kubelet), the project's own images
# imported with `ctr` (the aggregator's, and a pause image from e2e/node/pause). Opt-in: not part of
# `make test`; needs root. Prints which pieces run here and the exact error of those that do not; see
# docs/real-node.md. Stops everything it starts and removes its netns, bridge, cgroups and rules.
.PHONY: node-probe node-bins test-node

NODE_PAUSE := $(BUILD)/node/pause
NODE_PAUSE_IMAGE := $(BUILD)/node/pause-image.tar

# Only what the probe runs: etcd, kube-apiserver and the kubelet (~8 min cold on 2 cores, then ~1 s).
node-bins: deps
	bash e2e/istio/build/build.sh etcd kube-apiserver kubelet

$(NODE_PAUSE): e2e/node/pause/main.go e2e/node/pause/go.mod
	@mkdir -p $(dir $@)
	cd e2e/node/pause && CGO_ENABLED=0 GOFLAGS= go build -trimpath -ldflags='-s -w' -o $(abspath $@) .

$(NODE_PAUSE_IMAGE): $(NODE_PAUSE) $(ORAS) e2e/node/pack-image.sh
	bash e2e/node/pack-image.sh $(ORAS) $(NODE_PAUSE) pause probe $@

node-probe: node-bins image-aggregator $(NODE_PAUSE_IMAGE)
	bash e2e/node/probe.sh $(AGGREGATOR_IMAGE) $(NODE_PAUSE_IMAGE)

# e2e/node/test_real_node.py: the probe as a test (every piece PASS, nothing left behind); 17-24 s warm.
test-node: node-bins image-aggregator $(NODE_PAUSE_IMAGE)
	$(PYTEST) -q e2e/node
