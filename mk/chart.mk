# The Helm chart (charts/tailweight) with Helm built from its pinned Go module into
# $(TW_CACHE)/istio/bin (e2e/istio/build, ~5-12 min cold, instant after). `make test-istio` checks the
# chart (e2e/istio/test_manifests.py) and installs it for real (test_istio_tailweight.py).
.PHONY: helm chart-lint chart-package

HELM_VERSION := $(shell sed -n 's/^HELM_VERSION=//p' e2e/istio/build/versions.env)
HELM := $(TW_CACHE)/istio/bin/helm-$(HELM_VERSION)
CHART := charts/tailweight

helm:
	bash e2e/istio/build/build.sh helm

# `helm lint --strict` with the default values and with each of the chart's ci/ values files.
chart-lint: helm
	$(HELM) lint --strict $(CHART)
	@for f in $(CHART)/ci/*.yaml; do echo "$(HELM) lint --strict $(CHART) --values $$f"; \
		$(HELM) lint --strict $(CHART) --values $$f >/dev/null || exit 1; done

# The chart archive, $(BUILD)/charts/tailweight-<version>.tgz; publish it with
#   $(HELM) push $(BUILD)/charts/tailweight-<version>.tgz oci://<registry>/<path>
chart-package: chart-lint
	$(HELM) package $(CHART) --destination $(BUILD)/charts
