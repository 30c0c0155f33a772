// Wrapper module: pins the Prometheus Operator's main module, whose source carries the CRDs
// (example/prometheus-operator-crd/) the Istio e2e applies to validate the chart's PodMonitor and
// ServiceMonitor. Nothing is built from it; ../build.sh copies the CRD files out of the module
// cache after `go mod download` checked the module's zip against go.sum.
module tailweight.local/e2e/istio/build/prometheus-operator

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
