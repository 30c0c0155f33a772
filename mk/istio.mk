# Istio e2e: a real control plane (etcd, kube-apiserver, istiod, pilot-agent), istioctl for
# `istioctl analyze`, Helm and the Prometheus Operator's monitor CRDs for the chart, built from pinned
# Go modules through the module proxy and cached in $(TW_CACHE)/istio (~30 min cold, instant after).
.PHONY: istio-bins test-istio bench-istio-startup

# The tested Istio range: test-istio runs every Istio test against the pinned istiod, then these,
# which install and drive the chart, against the previous Istio line's istiod, pilot-agent and CRDs
# (ISTIO_PREVIOUS_* in e2e/istio/build/versions.env; docs/istio.md, "Version skew").
ISTIO_RANGE_TESTS := e2e/istio/test_istio_smoke.py e2e/istio/test_istio_tailweight.py \
	e2e/istio/test_istio_sidecar_bootstrap.py e2e/istio/test_istio_check.py

istio-bins: deps
	bash e2e/istio/build/build.sh

# Real processes on 127.0.0.1: the smoke test, then charts/tailweight packaged, pushed to a loopback
# OCI registry, installed, upgraded and uninstalled with Helm, and exercised with the filter ($(WASM),
# also as an OCI image), the static aggregator and the emulator's gRPC backends (see e2e/istio/README.md);
# and the artifacts of `make release` (test_release.py).
test-istio: istio-bins build oci-wasm aggregator-static release
	$(PYTEST) -q e2e/istio
	TW_ISTIO_LINE=previous $(PYTEST) -q $(ISTIO_RANGE_TESTS)

# Sidecar start-up (pilot-agent start -> Envoy ready) with and without tailweight, 1 and 50 outbound
# services: bench/results/istio-startup.{json,md} (~1-2 min; see e2e/istio/bench_startup.py).
bench-istio-startup: istio-bins wasm
	$(PY) e2e/istio/bench_startup.py
