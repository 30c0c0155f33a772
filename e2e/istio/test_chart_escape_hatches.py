"""The chart's escape hatches for the aggregator's pods (charts/tailweight/ci/escape-hatches-values.yaml):
pod labels and annotations, the Istio revision label, node selector, tolerations, affinity, topology
spread, extra arguments and environment, and exportTo of the Service and DestinationRule, each seen
in the objects `helm template` renders; values that would break the chart's own labels or hide the
aggregator from a namespace that needs it are refused. `helm lint` and the apiserver's server-side
dry run of the same file: test_manifests.py and test_istio_tailweight.py (every ci/ values file)."""

import pytest
import yaml
from test_manifests import CHART, find, one, render

from helm import template
from versions import HELM

HATCHES = CHART / "ci" / "escape-hatches-values.yaml"
SERVICES = [{"name": "cart", "namespace": "shop", "port": 8080, "clients": ["shop", "web"]}]

pytestmark = pytest.mark.skipif(not HELM.is_file(), reason=f"{HELM} not built: run `make istio-bins`")


def aggregator_objects(values: dict | None = None, files=(HATCHES,)) -> dict[str, dict]:
    objects = render(values, files)
    return {kind: one([o for o in objects if o["metadata"]["name"].endswith("-aggregator")], kind)
            for kind in ("Deployment", "Service", "DestinationRule")}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict]:
    return aggregator_objects()


@pytest.fixture(scope="module")
def hatches() -> dict:
    return yaml.safe_load(HATCHES.read_text())["aggregator"]


def pod_spec(rendered: dict[str, dict]) -> dict:
    return rendered["Deployment"]["spec"]["template"]["spec"]


def test_pod_labels_annotations_and_revision(rendered, hatches):
    meta = rendered["Deployment"]["spec"]["template"]["metadata"]
    assert meta["labels"]["istio.io/rev"] == "canary"
    assert hatches["podLabels"].items() <= meta["labels"].items()
    assert meta["labels"]["sidecar.istio.io/inject"] == "true"
    assert hatches["podAnnotations"].items() <= meta["annotations"].items()
    assert meta["annotations"]["prometheus.io/scrape"] == "true"
    # The selector still selects the pods.
    assert rendered["Deployment"]["spec"]["selector"]["matchLabels"].items() <= meta["labels"].items()


def test_scheduling(rendered, hatches):
    spec = pod_spec(rendered)
    assert spec["nodeSelector"] == hatches["nodeSelector"]
    assert spec["tolerations"] == hatches["tolerations"]
    assert spec["affinity"] == hatches["affinity"]
    selector = rendered["Deployment"]["spec"]["selector"]["matchLabels"]
    assert spec["topologySpreadConstraints"] == [{**hatches["topologySpreadConstraints"][0],
                                                  "labelSelector": {"matchLabels": selector}}]


def test_topology_spread_default_given_and_none():
    default = pod_spec(aggregator_objects({"services": SERVICES}, files=()))["topologySpreadConstraints"]
    assert [(c["topologyKey"], c["whenUnsatisfiable"]) for c in default] == [("kubernetes.io/hostname",
                                                                              "ScheduleAnyway")]
    given = {"topologyKey": "zone", "maxSkew": 2, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "x"}}}
    spec = pod_spec(aggregator_objects({"services": SERVICES, "aggregator": {"topologySpreadConstraints": [given]}},
                                       files=()))
    assert spec["topologySpreadConstraints"] == [given]
    spec = pod_spec(aggregator_objects({"services": SERVICES, "aggregator": {"topologySpreadConstraints": []}},
                                       files=()))
    assert "topologySpreadConstraints" not in spec


def test_extra_args_and_env_come_after_the_charts(rendered, hatches):
    (container,) = pod_spec(rendered)["containers"]
    assert container["args"][-1:] == hatches["extraArgs"]
    assert container["args"][0].startswith("--listen=")
    assert container["env"][-1:] == hatches["extraEnv"]
    assert container["env"][0]["name"] == "TAILWEIGHT_LOG"


def test_export_to_on_the_service_and_destination_rule(rendered, hatches):
    assert rendered["Service"]["metadata"]["annotations"]["networking.istio.io/exportTo"] == ".,shop,web"
    assert rendered["DestinationRule"]["spec"]["exportTo"] == hatches["exportTo"]
    # Unset: neither carries one (the mesh's defaults).
    plain = aggregator_objects({"services": SERVICES}, files=())
    assert "exportTo" not in plain["DestinationRule"]["spec"]
    assert "networking.istio.io/exportTo" not in plain["Service"]["metadata"].get("annotations", {})
    everywhere = aggregator_objects({"services": SERVICES, "aggregator": {"exportTo": ["*"]}}, files=())
    assert everywhere["DestinationRule"]["spec"]["exportTo"] == ["*"]


def test_without_the_hatches_the_pods_carry_none():
    objects = render({"services": SERVICES})
    deployment = one(find(objects, "Deployment"), "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert not {"affinity", "nodeSelector", "tolerations"} & set(spec)
    assert "istio.io/rev" not in deployment["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize(("values", "message"), [
    ({"aggregator": {"exportTo": ["."]}}, "hides the aggregator from namespace shop"),
    ({"aggregator": {"exportTo": [".", "shop"]}}, "hides the aggregator from namespace web"),
    ({"aggregator": {"exportTo": [".", "shop", "web"], "weightsReaders": {"namespaces": ["tools"]}}},
     "hides the aggregator from namespace tools"),
    ({"aggregator": {"podLabels": {"app.kubernetes.io/name": "x"}}}, "may not set app.kubernetes.io/name"),
    ({"aggregator": {"podLabels": {"istio.io/rev": "x"}}}, "aggregator.istioRevision"),
    ({"aggregator": {"extraEnv": [{"value": "x"}]}}, "missing property 'name'"),
    ({"aggregator": {"extraArgs": [7]}}, "at '/aggregator/extraArgs/0'"),
    ({"aggregator": {"topologySpreadConstraints": [{"maxSkew": 1}]}}, "missing properties 'topologyKey'"),
], ids=["export-release-only", "export-missing-client", "export-missing-reader", "label-selector-clash",
        "label-revision-clash", "env-without-name", "arg-not-string", "spread-incomplete"])
def test_values_that_would_break_the_aggregator_are_refused(values, message):
    r = template(CHART, {"services": SERVICES, **values}, check=False)
    assert r.returncode != 0, f"accepted: {values}"
    assert message in r.stderr, r.stderr
