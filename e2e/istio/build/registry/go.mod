// Wrapper module: a loopback OCI registry for the Istio e2e tests (oci:// WasmPlugin URLs).
// Built by ../build.sh.
module tailweight.local/e2e/istio/build/registry

go 1.26.0

require github.com/google/go-containerregistry v0.22.1
