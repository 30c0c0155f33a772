"""wasmplugin/ builds with kustomize and its parts agree with each other and with the filter.

No control plane needed: `kubectl kustomize` renders the base and the example overlay, and the
checks read the rendered objects (names, ports, headers that must match across resources). The
apiserver's own validation of the same objects is in test_istio_tailweight.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cluster import ISTIO_CACHE, VERSIONS

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "wasmplugin"
EXAMPLE = BASE / "overlays" / "example"
LOAD_STAMPS = BASE / "overlays" / "load-stamps"
STAMP_RS = REPO / "core" / "src" / "stamp.rs"
FILTER_DEFAULTS = REPO / "core" / "src" / "wire.rs"  # SHARD_HEADER lives here
CONFIG_RS = REPO / "core" / "src" / "config.rs"
DOCS = REPO / "docs" / "istio.md"
ISTIOCTL = ISTIO_CACHE / "bin" / f"istioctl-{VERSIONS['ISTIO_VERSION']}"

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not on PATH")


def kustomize(directory: Path) -> str:
    return subprocess.run(["kubectl", "kustomize", str(directory)], check=True, capture_output=True,
                          text=True, timeout=60).stdout


def render(directory: Path) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(kustomize(directory)) if d}


def rust_const(path: Path, name: str) -> str:
    """A `pub const NAME: &str = "...";` from the Rust sources (the filter's real default)."""
    m = re.search(rf'const {name}: &str = "([^"]+)"', path.read_text())
    assert m, f"{name} not found in {path}"
    return m.group(1)


def fqdn(service: dict) -> str:
    return f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"


@pytest.fixture(scope="module", params=[BASE, EXAMPLE, LOAD_STAMPS],
                ids=["base", "overlays/example", "overlays/load-stamps"])
def objects(request) -> dict[tuple[str, str], dict]:
    return render(request.param)


def test_wasmplugin_outbound_fail_open_with_pod_identity(objects):
    spec = objects[("WasmPlugin", "tailweight")]["spec"]
    assert spec["match"] == [{"mode": "CLIENT"}]
    assert spec["failStrategy"] == "FAIL_OPEN" and spec["type"] == "HTTP"
    assert spec["phase"] in ("AUTHZ", "STATS") and isinstance(spec["priority"], int)
    assert "selector" not in spec and "targetRefs" not in spec, "applies to the whole namespace"
    assert spec["vmConfig"]["env"] == [{"name": "POD_NAME", "valueFrom": "HOST"},
                                      {"name": "POD_NAMESPACE", "valueFrom": "HOST"}]
    assert spec["url"].startswith("oci://")


def test_load_stamps_server_plugin_inbound_and_client_reading():
    """overlays/load-stamps: the destination namespace's sidecars run the same module in the server
    role on inbound requests; the clients read stamps (the key the filter knows, in its range)."""
    objects = render(LOAD_STAMPS)
    client = objects[("WasmPlugin", "tailweight")]
    server = objects[("WasmPlugin", "tailweight-load-stamps")]
    spec = server["spec"]
    assert spec["match"] == [{"mode": "SERVER"}]
    assert spec["failStrategy"] == "FAIL_OPEN" and spec["type"] == "HTTP"
    assert spec["url"] == client["spec"]["url"], "one module, two roles"
    assert "selector" not in spec and "targetRefs" not in spec, "applies to the whole namespace"
    config = spec["pluginConfig"]
    assert config["role"] == "server" and "aggregator" not in config, "a server-role filter never reports"
    known = set(re.findall(r'f\.[a-z_]+\(\s*"([a-z_]+)"', CONFIG_RS.read_text()))
    assert set(config) <= known, set(config) - known
    # The sidecars stamped are those of the services the clients steer to.
    destinations = {c.rsplit("||", 1)[1] for c in client["spec"]["pluginConfig"]["clusters"]}
    assert {d.split(".")[1] for d in destinations} == {server["metadata"]["namespace"]}
    max_age = client["spec"]["pluginConfig"]["load_stamp_max_age_ms"]
    assert isinstance(max_age, int) and 0 < max_age <= 10_000
    assert rust_const(STAMP_RS, "LOAD_STAMP_HEADER") in (REPO / "docs" / "wire-protocol.md").read_text()
    # Without the overlay nothing stamps and nothing reads.
    base = render(BASE)
    assert ("WasmPlugin", "tailweight-load-stamps") not in base
    assert "load_stamp_max_age_ms" not in base[("WasmPlugin", "tailweight")]["spec"]["pluginConfig"]


def test_plugin_config_names_the_aggregator_service(objects):
    service = objects[("Service", "tailweight-aggregator")]
    (port,) = service["spec"]["ports"]
    aggregator = objects[("WasmPlugin", "tailweight")]["spec"]["pluginConfig"]["aggregator"]
    assert aggregator["cluster"] == f"outbound|{port['port']}||{fqdn(service)}"
    assert aggregator["authority"] == fqdn(service)
    assert port["name"] == "http" or port.get("appProtocol") == "http", "the mesh must see HTTP"
    deployment = objects[("Deployment", "tailweight-aggregator")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert port["targetPort"] in [p["name"] for p in container["ports"]]
    assert f"--listen=0.0.0.0:{container['ports'][0]['containerPort']}" in container["args"]


def test_plugin_config_is_valid_for_the_filter(objects):
    """Every key the manifests set is one FilterConfig::parse knows (it rejects unknown keys)."""
    config = objects[("WasmPlugin", "tailweight")]["spec"]["pluginConfig"]
    source = CONFIG_RS.read_text()
    known = set(re.findall(r'f\.[a-z_]+\(\s*"([a-z_]+)"', source))
    assert set(config) <= known, set(config) - known
    assert set(config["aggregator"]) <= known, set(config["aggregator"]) - known


def test_clusters_and_envoyfilter_list_the_same_services(objects):
    wasm = objects[("WasmPlugin", "tailweight")]
    clusters = set(wasm["spec"]["pluginConfig"]["clusters"])
    envoyfilter = objects[("EnvoyFilter", "tailweight-override-host")]
    assert envoyfilter["metadata"]["namespace"] == wasm["metadata"]["namespace"]
    patched = set()
    for patch in envoyfilter["spec"]["configPatches"]:
        assert patch["applyTo"] == "CLUSTER" and patch["match"]["context"] == "SIDECAR_OUTBOUND"
        match = patch["match"]["cluster"]
        patched.add(f"outbound|{match['portNumber']}||{match['service']}")
        policy = patch["patch"]["value"]["load_balancing_policy"]["policies"][0]["typed_extension_config"]
        assert policy["name"] == "envoy.load_balancing_policies.override_host"
        config = policy["typed_config"]
        # The header the filter writes (FilterConfig default; the manifests do not override it).
        assert config["override_host_sources"] == [{"header": "x-gateway-destination-endpoint"}]
        assert '"x-gateway-destination-endpoint"' in CONFIG_RS.read_text()
        fallback = config["fallback_policy"]["policies"][0]["typed_extension_config"]["name"]
        assert fallback == "envoy.load_balancing_policies.least_request"
    assert clusters == patched


def test_incoming_override_header_removed_before_any_filter(objects):
    """The sidecars of an opted-in namespace remove the header override_host reads before every
    other outbound HTTP filter (the WasmPlugin's included, whatever its phase), so only the filter
    writes it; the e2e test shows it in a real sidecar."""
    wasm = objects[("WasmPlugin", "tailweight")]
    strip = objects[("EnvoyFilter", "tailweight-strip-incoming-header")]
    assert strip["metadata"]["namespace"] == wasm["metadata"]["namespace"]
    assert "workloadSelector" not in strip["spec"] and "targetRefs" not in strip["spec"], "the whole namespace"
    (patch,) = strip["spec"]["configPatches"]
    assert patch["applyTo"] == "HTTP_FILTER" and patch["patch"]["operation"] == "INSERT_FIRST"
    assert patch["match"] == {"context": "SIDECAR_OUTBOUND", "listener": {"filterChain": {"filter": {
        "name": "envoy.filters.network.http_connection_manager"}}}}
    config = patch["patch"]["value"]["typed_config"]
    assert config["@type"].endswith("envoy.extensions.filters.http.header_mutation.v3.HeaderMutation")
    override_host = objects[("EnvoyFilter", "tailweight-override-host")]["spec"]["configPatches"]
    read = {s["header"] for p in override_host for s in p["patch"]["value"]["load_balancing_policy"]["policies"][0][
        "typed_extension_config"]["typed_config"]["override_host_sources"]}
    assert config["mutations"] == {"request_mutations": [{"remove": h} for h in sorted(read)]}
    # The filter writes the same header (it is not configured otherwise), after the removal.
    assert "header" not in wasm["spec"]["pluginConfig"]


def test_an_overlay_can_keep_incoming_headers(tmp_path):
    """The patches docs/istio.md gives for a namespace that keeps incoming headers (removal dropped,
    trust_incoming_header on) render as described."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    (snippet,) = [b for b in blocks if "$patch: delete" in b and "tailweight-strip-incoming-header" in b]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": "shop",
        "resources": [os.path.relpath(BASE / "client", tmp_path)], **yaml.safe_load(snippet)}))
    objects = render(tmp_path)
    assert ("EnvoyFilter", "tailweight-strip-incoming-header") not in objects, objects.keys()
    assert objects[("WasmPlugin", "tailweight")]["spec"]["pluginConfig"]["trust_incoming_header"] is True
    assert objects[("EnvoyFilter", "tailweight-override-host")]["metadata"]["namespace"] == "shop"


def test_destination_rule_hashes_reports_by_shard(objects):
    service = objects[("Service", "tailweight-aggregator")]
    rule = objects[("DestinationRule", "tailweight-aggregator")]
    assert rule["spec"]["host"] == fqdn(service)
    hashing = rule["spec"]["trafficPolicy"]["loadBalancer"]["consistentHash"]
    assert hashing["httpHeaderName"] == rust_const(FILTER_DEFAULTS, "SHARD_HEADER")
    assert "maglev" in hashing or "ringHash" in hashing
    assert rule["spec"]["trafficPolicy"]["outlierDetection"]["maxEjectionPercent"] < 100


def test_aggregator_deployment_hardened_and_observable(objects):
    deployment = objects[("Deployment", "tailweight-aggregator")]
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["spec"]["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    labels = pod["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget"):
        selector = objects[(kind, "tailweight-aggregator")]["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert selector.items() <= labels.items(), (kind, selector)
    policy = objects[("AuthorizationPolicy", "tailweight-aggregator")]["spec"]
    assert policy["selector"]["matchLabels"].items() <= labels.items()


def test_authorization_policy_admits_the_opted_in_namespaces(objects):
    policy = objects[("AuthorizationPolicy", "tailweight-aggregator")]["spec"]
    assert policy["action"] == "ALLOW"
    reports = policy["rules"][0]
    assert {"methods": ["POST"], "paths": ["/v1/report"]} in [t["operation"] for t in reports["to"]]
    opted_in = {objects[("WasmPlugin", "tailweight")]["metadata"]["namespace"]}
    assert set(reports["from"][0]["source"]["namespaces"]) == opted_in
    # Nothing else may POST: every other rule is read-only.
    for rule in policy["rules"][1:]:
        assert all(t["operation"]["methods"] == ["GET"] for t in rule["to"]), rule
    assert json.dumps(policy).count("/v1/report") == 1


# ---------------------------------------------------------------------------------------------------
# istioctl analyze (built by `make istio-bins` from the same istio module as the istiod under test)


def istioctl_analyze(tmp_path: Path, manifests: str) -> list[dict]:
    """`istioctl analyze --use-kube=false --all-namespaces` of `manifests`: its messages."""
    if not ISTIOCTL.is_file():
        pytest.skip(f"{ISTIOCTL} not built: run `make istio-bins`")
    path = tmp_path / "manifests.yaml"
    path.write_text(manifests)
    out = subprocess.run([str(ISTIOCTL), "analyze", "--use-kube=false", "--all-namespaces", "--output", "json",
                          str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout or "[]")


# IST0133 "EnvoyFilter exposes internal implementation details": istioctl says it of every
# EnvoyFilter; ours are the documented way to switch a cluster's load balancer and to remove an
# application's override header (docs/istio.md "The EnvoyFilters"), so that warning stays, once
# for each of them and for nothing else.
ENVOYFILTER_CAVEAT = ("IST0133", "EnvoyFilter exposes internal implementation details")
ENVOYFILTERS = ("tailweight-override-host", "tailweight-strip-incoming-header")


@pytest.mark.parametrize("directory", [BASE, EXAMPLE, LOAD_STAMPS],
                         ids=["base", "overlays/example", "overlays/load-stamps"])
def test_istioctl_analyze_finds_nothing_but_the_envoyfilter_caveat(directory, tmp_path):
    messages = istioctl_analyze(tmp_path, kustomize(directory))
    unexplained = [m for m in messages
                   if (m["code"], m["message"].split(": ", 1)[-1][:len(ENVOYFILTER_CAVEAT[1])]) != ENVOYFILTER_CAVEAT
                   or not m["origin"].endswith(tuple(f"/{name}" for name in ENVOYFILTERS))]
    assert unexplained == [], json.dumps(unexplained, indent=1)
    # The caveats themselves show the analysis saw our objects (an empty answer could mean it saw none).
    assert sorted(m["origin"].rsplit("/", 1)[-1] for m in messages) == sorted(ENVOYFILTERS), messages


def test_every_envoyfilter_has_an_explicit_priority(objects):
    """Released istioctl versions count MERGE as a relative operation and warn (IST0151) without a
    priority; the pinned master counts only REMOVE, REPLACE and INSERT_*. The priority is set
    either way, and overlays (which patch configPatches only) keep it."""
    filters = [o for (kind, _), o in objects.items() if kind == "EnvoyFilter"]
    assert filters and all(isinstance(f["spec"].get("priority"), int) and f["spec"]["priority"] != 0
                           for f in filters), filters


def test_istioctl_analyze_checks_envoyfilter_priorities(tmp_path):
    """The analyzer above is live for IST0151: our EnvoyFilter with a relative operation (REMOVE)
    draws it without a priority, and not with ours."""
    (envoyfilter,) = [d for d in yaml.safe_load_all(kustomize(BASE))
                      if d and d["kind"] == "EnvoyFilter" and d["metadata"]["name"] == "tailweight-override-host"]
    for patch in envoyfilter["spec"]["configPatches"]:
        patch["patch"] = {"operation": "REMOVE"}
    with_priority = istioctl_analyze(tmp_path, yaml.safe_dump(envoyfilter))
    del envoyfilter["spec"]["priority"]
    without = istioctl_analyze(tmp_path, yaml.safe_dump(envoyfilter))
    assert "IST0151" in [m["code"] for m in without], without
    assert "IST0151" not in [m["code"] for m in with_priority], with_priority
