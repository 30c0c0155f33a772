"""charts/tailweight renders with `helm template`, its parts agree with each other and with the
filter, and its values are checked before anything is installed.

No control plane needed: `helm template` renders the chart with each values file in charts/tailweight/ci
(and with variations of them), and the checks read the rendered objects (names, ports, headers that
must match across resources). The apiserver's own validation of the same objects and the install
itself are in test_istio_tailweight.py.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from helm import package_names, template
from versions import HELM, ISTIOCTL

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tailweight"
CI_VALUES = {p.stem: p for p in sorted((CHART / "ci").glob("*.yaml"))}
DOCS = REPO / "docs" / "istio.md"
OVERRIDE_HEADER = "x-gateway-destination-endpoint"

pytestmark = pytest.mark.skipif(not HELM.is_file(), reason=f"{HELM} not built: run `make istio-bins`")


def rust_source(marker: str) -> str:
    """The text of the one Rust source file of the workspace (core and the crates beside it) that
    contains `marker`: found by content, so that it stays found when files move between crates."""
    found = [p for top in REPO.iterdir() if top.is_dir() and top.name not in ("target", "e2e", "build", ".git")
             for p in top.rglob("*.rs") if "target" not in p.parts and marker in p.read_text()]
    assert len(found) == 1, (marker, found)
    return found[0].read_text()


FILTER_CONFIG = 'f.integer("endpoint_ttl_ms"'  # marks the filter's pluginConfig parser
HEALTH_CHECK_CONFIG = "fn health_check(f: &mut Fields)"  # and the part of it that reads health checks


def filter_config_keys() -> set[str]:
    """Every pluginConfig key FilterConfig::parse knows (it rejects unknown keys): the string
    arguments of its field reads, and the `&str` constants naming keys in its health-check part."""
    keys = r'(?:f\.[a-z_]+\(\s*|\(&mut f, |const [A-Z_]+: &str = )"([a-z_]+)"'
    return {k for marker in (FILTER_CONFIG, HEALTH_CHECK_CONFIG) for k in re.findall(keys, rust_source(marker))}


def rust_const(name: str) -> str:
    """A `pub const NAME: &str = "...";` from the Rust sources (the filter's real default)."""
    m = re.search(rf'const {name}: &str = "([^"]+)"', rust_source(f"pub const {name}: &str"))
    assert m, name
    return m.group(1)


def render(values: dict | None = None, files: tuple[Path, ...] = ()) -> list[dict]:
    return [d for d in yaml.safe_load_all(template(CHART, values, files).stdout) if d]


def find(objects: list[dict], kind: str, name: str | None = None, namespace: str | None = None) -> list[dict]:
    return [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])
            and namespace in (None, o["metadata"]["namespace"])]


def one(objects: list[dict], kind: str, name: str | None = None, namespace: str | None = None) -> dict:
    (o,) = find(objects, kind, name, namespace)
    return o


def fqdn(service: dict) -> str:
    return f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"


def wasmplugins(objects: list[dict]) -> list[dict]:
    """The client-role WasmPlugins (one per opted-in namespace)."""
    return [o for o in find(objects, "WasmPlugin") if o["spec"]["match"] == [{"mode": "CLIENT"}]]


def values_of(name: str) -> dict:
    return yaml.safe_load(CI_VALUES[name].read_text())


@pytest.fixture(scope="module", params=list(CI_VALUES), ids=list(CI_VALUES))
def objects(request) -> list[dict]:
    return render(files=(CI_VALUES[request.param],))


def test_chart_version_is_the_workspace_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    workspace = tomllib.loads((REPO / "Cargo.toml").read_text())["workspace"]["package"]["version"]
    assert chart["version"] == chart["appVersion"] == workspace


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=["defaults", *CI_VALUES])
def test_helm_lint_finds_nothing(values):
    """`helm lint --strict` (warnings fail it): only the INFO that the chart has no icon remains."""
    args = ["lint", "--strict", str(CHART), *(["--values", str(CI_VALUES[values])] if values else [])]
    out = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    findings = [line for line in out.stdout.splitlines() if line.startswith("[")]
    assert findings == ["[INFO] Chart.yaml: icon is recommended"], out.stdout


def test_helm_package_makes_the_archive(tmp_path):
    """`helm package`: <name>-<version>.tgz holding the chart, its schema and the bootstrap file,
    without the CI values."""
    out = subprocess.run([str(HELM), "package", str(CHART), "--destination", str(tmp_path)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    (archive,) = tmp_path.glob("*.tgz")
    assert archive.name == "tailweight-{version}.tgz".format(**yaml.safe_load((CHART / "Chart.yaml").read_text()))
    assert str(archive) in out
    names = package_names(archive)
    assert {"tailweight/Chart.yaml", "tailweight/values.yaml", "tailweight/values.schema.json",
            "tailweight/files/sidecar-bootstrap.json", "tailweight/templates/clients.yaml"} <= names, names
    assert not [n for n in names if n.startswith("tailweight/ci/")], names
    with tarfile.open(archive) as tar:
        packed = tar.extractfile("tailweight/values.schema.json").read()
    assert packed == (CHART / "values.schema.json").read_bytes()


# ---------------------------------------------------------------------------------------------------
# One list: every name and patch comes from `services`


def test_one_services_list_generates_every_cluster_name_and_patch():
    """Taking an entry out of `services` takes its cluster out of every object (WasmPlugin
    clusters, override_host patches) and a client namespace left without services out of
    everything (its objects, the AuthorizationPolicy); adding it back puts all of it back."""
    full = values_of("example-values")
    fewer = copy.deepcopy(full)
    fewer["services"] = [s for s in full["services"] if s["name"] != "cart"]
    with_cart, without = render(full), render(fewer)
    cart = "cart.shop.svc.cluster.local"
    assert cart not in yaml.safe_dump_all(without)
    assert {o["metadata"]["namespace"] for o in wasmplugins(with_cart)} == {"shop", "web"}
    assert {o["metadata"]["namespace"] for o in wasmplugins(without)} == {"shop"}
    assert not [o for o in without if o["metadata"]["namespace"] == "web"], "namespace web keeps objects"
    rule = one(without, "AuthorizationPolicy")["spec"]["rules"][0]
    assert rule["from"][0]["source"]["namespaces"] == ["shop"]
    for wasm in wasmplugins(with_cart):
        assert "outbound|8080||" + cart in wasm["spec"]["pluginConfig"]["clusters"]


def test_load_stamps_server_plugin_inbound_and_client_reading():
    """`loadStamps: true` on a service: its namespace's sidecars run the same module in the server
    role on inbound requests; its clients read stamps (the key the filter knows, in its range);
    a client namespace none of whose services is stamped does not."""
    objects = render(files=(CI_VALUES["load-stamps-values"],))
    server = one(objects, "WasmPlugin", "tailweight-server", "shop")  # where the stamped service `cart` runs
    spec = server["spec"]
    assert spec["match"] == [{"mode": "SERVER"}]
    assert spec["failStrategy"] == "FAIL_OPEN" and spec["type"] == "HTTP"
    assert "selector" not in spec and "targetRefs" not in spec, "applies to the whole namespace"
    config = spec["pluginConfig"]
    assert config["role"] == "server" and "clusters" not in config, "a server-role filter never steers"
    assert set(config) <= filter_config_keys(), set(config) - filter_config_keys()
    web = one(objects, "WasmPlugin", "tailweight", "web")["spec"]
    assert spec["url"] == web["url"], "one module, two roles"
    max_age = web["pluginConfig"]["load_stamp_max_age_ms"]
    assert isinstance(max_age, int) and 0 < max_age <= 10_000
    # web calls the stamped cart (two subsets) and catalog, which opts out (`loadStamps: false`;
    # its namespace still runs the server role, for attestations): it reads the stamps of cart's
    # clusters only, each one it steers.
    cart = "cart.shop.svc.cluster.local"
    stamped = web["pluginConfig"]["load_stamp_clusters"]
    assert stamped == [f"outbound|8080|v1|{cart}", f"outbound|8080|v2|{cart}"], stamped
    assert set(stamped) < set(web["pluginConfig"]["clusters"])
    assert "outbound|9090||catalog.catalog.svc.cluster.local" in web["pluginConfig"]["clusters"]
    # shop calls only catalog, which is not stamped: it reads no stamps.
    shop = one(objects, "WasmPlugin", "tailweight", "shop")["spec"]["pluginConfig"]
    assert "load_stamp_max_age_ms" not in shop and "load_stamp_clusters" not in shop
    assert rust_const("LOAD_STAMP_HEADER") in (REPO / "docs" / "wire-protocol.md").read_text()
    # Without stamped services and without attestations nothing stamps and nothing reads.
    base = render({**values_of("example-values"), "attestations": {"enabled": False}})
    assert not find(base, "WasmPlugin", "tailweight-server")
    assert all(not {"load_stamp_max_age_ms", "load_stamp_clusters"} & set(w["spec"]["pluginConfig"])
               for w in wasmplugins(base))
    # Stamps without the aggregator: the server role stamps and attests nothing.
    alone = render({**values_of("load-stamps-values"), "aggregator": {"enabled": False}})
    (server,) = find(alone, "WasmPlugin", "tailweight-server")
    assert server["metadata"]["namespace"] == "shop"
    assert set(server["spec"]["pluginConfig"]) == {"role", "sync_interval_ms"}


def test_the_default_install_stamps_every_service_whose_namespace_runs_the_server_role():
    """The default deployment (docs/configuration.md): with the aggregator and attestations on,
    every listed service's namespace runs the server role, so every service is stamped and each
    client reads the stamps of every cluster it steers, with the filter's defaults for everything
    else (no keys beyond the generated ones). Without the aggregator nothing stamps unless a service
    says `loadStamps: true`."""
    values = values_of("example-values")
    objects = render(values)
    assert {o["metadata"]["namespace"] for o in find(objects, "WasmPlugin", "tailweight-server")} == \
        {s["namespace"] for s in values["services"]}
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert defaults["filter"] == {} and defaults["attestations"]["enabled"] and defaults["aggregator"]["enabled"]
    for plugin in wasmplugins(objects):
        config = plugin["spec"]["pluginConfig"]
        assert set(config) == {"clusters", "aggregator", "load_stamp_max_age_ms", "load_stamp_clusters"}, config
        assert config["load_stamp_clusters"] == config["clusters"]
        assert config["load_stamp_max_age_ms"] == defaults["loadStamps"]["maxAgeMs"]
    alone = render({**values, "aggregator": {"enabled": False}})
    assert not find(alone, "WasmPlugin", "tailweight-server")
    assert all(not {"load_stamp_max_age_ms", "load_stamp_clusters"} & set(w["spec"]["pluginConfig"])
               for w in wasmplugins(alone))


def expected_attest_clusters(values: dict) -> dict[str, set[str]]:
    """What each namespace's server role should attest for, from `services` alone: every port and
    subset of the services of that namespace, as their clients name the clusters."""
    expected: dict[str, set[str]] = {}
    for s in values["services"]:
        for subset in s.get("subsets") or [""]:
            expected.setdefault(s["namespace"], set()).add(
                f"outbound|{s['port']}|{subset}|{s['name']}.{s['namespace']}.svc.cluster.local")
    return expected


def server_plugins(objects: list[dict]) -> dict[str, dict]:
    """The server-role WasmPlugins' pluginConfig, by namespace."""
    plugins = [o for o in find(objects, "WasmPlugin") if o["spec"]["match"] == [{"mode": "SERVER"}]]
    assert all(o["metadata"]["name"] == "tailweight-server" for o in plugins)
    return {o["metadata"]["namespace"]: o["spec"]["pluginConfig"] for o in plugins}


@pytest.mark.parametrize("name", list(CI_VALUES))
def test_attest_clusters_are_generated_from_the_services_list(name):
    """Each namespace with a service in `services` gets a server-role filter that attests to the
    aggregator (its cluster, as the clients' filters name it) for exactly the clusters of that
    namespace's services, which are the very names its clients steer; the AuthorizationPolicy lets
    exactly those namespaces POST /v1/attest."""
    values, objects = values_of(name), render(files=(CI_VALUES[name],))
    expected = expected_attest_clusters(values)
    servers = server_plugins(objects)
    assert {ns: set(c["attest_clusters"]) for ns, c in servers.items()} == expected
    steered = {c for w in wasmplugins(objects) for c in w["spec"]["pluginConfig"]["clusters"]}
    client_aggregator = wasmplugins(objects)[0]["spec"]["pluginConfig"]["aggregator"]
    for config in servers.values():
        assert config["role"] == "server" and set(config) <= filter_config_keys()
        assert config["aggregator"] == client_aggregator, "attestations go where the reports go"
        # A service with no clients listed here still attests (its callers are outside the list).
        assert set(config["attest_clusters"]) - steered <= {
            c for s in values["services"] if s.get("clients") == [] for c in expected[s["namespace"]]}
    rules = one(objects, "AuthorizationPolicy", "tailweight-aggregator")["spec"]["rules"]
    (attest,) = [r for r in rules if any("/v1/attest" in t["operation"]["paths"] for t in r["to"])]
    assert attest["to"] == [{"operation": {"methods": ["POST"], "paths": ["/v1/attest"]}}]
    assert attest["from"] == [{"source": {"namespaces": sorted(expected)}}]


def test_attest_clusters_follow_the_services_list():
    """Adding a service adds its clusters to its namespace's attestations (and a new namespace to
    the policy); the knobs of filter.aggregator reach the server role too; without the aggregator
    or with attestations off, nothing attests and no namespace may POST /v1/attest."""
    values = values_of("example-values")
    more = {**values, "services": [*values["services"], {"name": "ledger", "namespace": "bank", "port": 7070,
                                                          "subsets": ["a", "b"], "clients": ["shop"]}],
            "filter": {"aggregator": {"reportIntervalMs": 2000}}}
    servers = server_plugins(render(more))
    assert set(servers["bank"]["attest_clusters"]) == {"outbound|7070|a|ledger.bank.svc.cluster.local",
                                                      "outbound|7070|b|ledger.bank.svc.cluster.local"}
    assert set(servers["shop"]["attest_clusters"]) == expected_attest_clusters(values)["shop"]
    assert servers["bank"]["aggregator"]["report_interval_ms"] == 2000
    for off in ({"aggregator": {"enabled": False}}, {"attestations": {"enabled": False}}):
        objects = render({**more, **off})
        assert all("attest_clusters" not in c and "aggregator" not in c for c in server_plugins(objects).values())
        assert "/v1/attest" not in yaml.safe_dump_all(objects)


def test_too_many_clusters_to_attest_for_are_refused():
    """The server role takes at most 64 attest_clusters: more in one namespace fail the install
    with a message naming the namespace and the way out, not a filter that refuses its config."""
    services = [{"name": f"s{i}", "namespace": "big", "port": 8000 + i} for i in range(65)]
    r = template(CHART, {"services": services}, check=False)
    assert r.returncode != 0 and "namespace big has 65 clusters" in r.stderr, r.stderr
    assert "attestations.enabled=false" in r.stderr
    assert template(CHART, {"services": services, "attestations": {"enabled": False}}, check=False).returncode == 0


def test_subsets_are_clusters_of_their_own():
    objects = render(files=(CI_VALUES["load-stamps-values"],))
    clusters = one(objects, "WasmPlugin", "tailweight", "web")["spec"]["pluginConfig"]["clusters"]
    assert {"outbound|8080|v1|cart.shop.svc.cluster.local", "outbound|8080|v2|cart.shop.svc.cluster.local"} <= set(
        clusters)
    patches = one(objects, "EnvoyFilter", "tailweight-override-host", "web")["spec"]["configPatches"]
    assert {p["match"]["cluster"].get("subset") for p in patches} == {"v1", "v2", None}


# ---------------------------------------------------------------------------------------------------
# The parts agree


def test_wasmplugin_outbound_fail_open_with_pod_identity(objects):
    plugins = wasmplugins(objects)
    assert plugins
    for wasm in plugins:
        spec = wasm["spec"]
        assert spec["failStrategy"] == "FAIL_OPEN" and spec["type"] == "HTTP"
        assert spec["phase"] in ("AUTHZ", "STATS") and isinstance(spec["priority"], int)
        assert "selector" not in spec and "targetRefs" not in spec, "applies to the whole namespace"
        assert spec["vmConfig"]["env"] == [{"name": "POD_NAME", "valueFrom": "HOST"},
                                          {"name": "POD_NAMESPACE", "valueFrom": "HOST"}]
        assert re.match(r"(oci://\S+@sha256:[0-9a-f]{64}|oci://\S+:\S+|https?://\S+|file:///\S+)$", spec["url"])
        assert spec["url"].startswith("http") == ("sha256" in spec), "an http module comes with its checksum"


def aggregator_ports(objects: list[dict]) -> tuple[dict, dict, dict]:
    """The aggregator Service's report port (`http`) and read-only port, and its container."""
    service = one(objects, "Service", "tailweight-aggregator")
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert set(ports) == {"http", "http-read-only"}, ports
    (container,) = one(objects, "Deployment", "tailweight-aggregator")["spec"]["template"]["spec"]["containers"]
    return ports["http"], ports["http-read-only"], container


def test_plugin_config_names_the_aggregator_service(objects):
    service = one(objects, "Service", "tailweight-aggregator")
    port, _, container = aggregator_ports(objects)
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port["targetPort"] in container_ports
    assert f"--listen=0.0.0.0:{container_ports[port['targetPort']]}" in container["args"]
    assert port["name"] == "http" or port.get("appProtocol") == "http", "the mesh must see HTTP"
    for wasm in wasmplugins(objects):
        aggregator = wasm["spec"]["pluginConfig"]["aggregator"]
        assert aggregator["cluster"] == f"outbound|{port['port']}||{fqdn(service)}"
        assert aggregator["authority"] == fqdn(service)


def test_read_only_listener_has_its_own_ports_and_takes_the_callers_around_the_sidecar(objects):
    """--read-only-listen on a container port and a Service port of its own (HTTP for the mesh);
    the agent's metrics scrape (prometheus.io/port) and the probes, which reach the container around
    its sidecar, go there; everything through the sidecar with an identity (reports, attestations:
    the filters' aggregator cluster) goes to the report port."""
    reports, read_only, container = aggregator_ports(objects)
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert read_only["targetPort"] == "http-read-only" and read_only.get("appProtocol") == "http"
    ro_port = container_ports["http-read-only"]
    assert ro_port != container_ports["http"] and read_only["port"] == ro_port != reports["port"]
    assert f"--read-only-listen=0.0.0.0:{ro_port}" in container["args"]
    pod = one(objects, "Deployment", "tailweight-aggregator")["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ro_port)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == "http-read-only", probe
    plugins = [*wasmplugins(objects), *find(objects, "WasmPlugin", "tailweight-server")]
    for wasm in plugins:
        assert wasm["spec"]["pluginConfig"]["aggregator"]["cluster"].startswith(f"outbound|{reports['port']}||")


def test_read_only_port_is_a_value_and_never_the_report_port():
    objects = render({**values_of("example-values"), "aggregator": {"readOnlyPort": 9443}})
    _, read_only, container = aggregator_ports(objects)
    assert read_only["port"] == 9443 and "--read-only-listen=0.0.0.0:9443" in container["args"]
    for port in (8080, 15020):
        r = template(CHART, {"aggregator": {"readOnlyPort": port}}, check=False)
        assert r.returncode != 0 and "/aggregator/readOnlyPort" in r.stderr, r.stderr


def test_plugin_config_is_valid_for_the_filter(objects):
    """Every key the chart sets is one FilterConfig::parse knows (it rejects unknown keys)."""
    known = filter_config_keys()
    for wasm in wasmplugins(objects):
        config = wasm["spec"]["pluginConfig"]
        assert set(config) <= known, set(config) - known
        assert set(config["aggregator"]) <= known, set(config["aggregator"]) - known


def test_every_filter_value_is_a_key_of_the_filter():
    """The chart's `filter` values (camelCase) name exactly keys the filter knows (snake_case): a
    value the schema lets through reaches a key that exists."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["filter"]["properties"]
    snake = lambda k: re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower()  # noqa: E731 - sprig's snakecase
    known = filter_config_keys()
    assert {snake(k) for k in schema} <= known, {snake(k) for k in schema} - known
    assert {snake(k) for k in schema["aggregator"]["properties"]} <= known
    example = {"boolean": True, "string": "/healthz", "array": None}
    item = {"string": "outbound|80||a.demo.svc.cluster.local", "integer": 14}
    every = {k: (example.get(v.get("type"), 1) if v.get("type") != "array" else [item[v["items"]["type"]]])
             for k, v in schema.items() if k != "aggregator"}
    every["aggregator"] = {"reportIntervalMs": 1000, "timeoutMs": 500}
    (wasm,) = wasmplugins(render({"services": [{"name": "a", "namespace": "demo", "port": 80}], "filter": every}))
    config = wasm["spec"]["pluginConfig"]
    assert {snake(k) for k in every if k != "aggregator"} <= set(config)
    assert {"report_interval_ms": 1000, "timeout_ms": 500}.items() <= config["aggregator"].items()


def test_clusters_and_envoyfilter_list_the_same_services(objects):
    for wasm in wasmplugins(objects):
        ns = wasm["metadata"]["namespace"]
        clusters = set(wasm["spec"]["pluginConfig"]["clusters"])
        envoyfilter = one(objects, "EnvoyFilter", "tailweight-override-host", ns)
        patched = set()
        for patch in envoyfilter["spec"]["configPatches"]:
            assert patch["applyTo"] == "CLUSTER" and patch["match"]["context"] == "SIDECAR_OUTBOUND"
            match = patch["match"]["cluster"]
            patched.add(f"outbound|{match['portNumber']}|{match.get('subset', '')}|{match['service']}")
            policy = patch["patch"]["value"]["load_balancing_policy"]["policies"][0]["typed_extension_config"]
            assert policy["name"] == "envoy.load_balancing_policies.override_host"
            config = policy["typed_config"]
            # The header the filter writes (FilterConfig default; the chart does not override it).
            assert config["override_host_sources"] == [{"header": OVERRIDE_HEADER}]
            assert f'"{OVERRIDE_HEADER}"' in rust_source(FILTER_CONFIG)
            fallback = config["fallback_policy"]["policies"][0]["typed_extension_config"]["name"]
            assert fallback == "envoy.load_balancing_policies.least_request"
        assert clusters == patched


@pytest.mark.parametrize("name", list(CI_VALUES))
def test_services_listed_are_the_clusters_steered(name):
    """Cluster names vs Services: each `services` entry becomes outbound|<port>|<subset>|<svc>.<ns>
    in the WasmPlugin of each of its client namespaces, and nothing else is steered."""
    values, objects = values_of(name), render(files=(CI_VALUES[name],))
    expected: dict[str, set[str]] = {}
    for s in values["services"]:
        for ns in s.get("clients", [s["namespace"]]):
            for subset in s.get("subsets") or [""]:
                expected.setdefault(ns, set()).add(
                    f"outbound|{s['port']}|{subset}|{s['name']}.{s['namespace']}.svc.cluster.local")
    got = {w["metadata"]["namespace"]: set(w["spec"]["pluginConfig"]["clusters"]) for w in wasmplugins(objects)}
    assert got == expected


def test_incoming_override_header_removed_before_any_filter(objects):
    """The sidecars of an opted-in namespace remove the header override_host reads before every
    other outbound HTTP filter (the WasmPlugin's included, whatever its phase), so only the filter
    writes it; the e2e test shows it in a real sidecar."""
    for wasm in wasmplugins(objects):
        ns = wasm["metadata"]["namespace"]
        strip = one(objects, "EnvoyFilter", "tailweight-strip-incoming-header", ns)
        assert "workloadSelector" not in strip["spec"] and "targetRefs" not in strip["spec"], "the whole namespace"
        (patch,) = strip["spec"]["configPatches"]
        assert patch["applyTo"] == "HTTP_FILTER" and patch["patch"]["operation"] == "INSERT_FIRST"
        assert patch["match"] == {"context": "SIDECAR_OUTBOUND", "listener": {"filterChain": {"filter": {
            "name": "envoy.filters.network.http_connection_manager"}}}}
        config = patch["patch"]["value"]["typed_config"]
        assert config["@type"].endswith("envoy.extensions.filters.http.header_mutation.v3.HeaderMutation")
        override_host = one(objects, "EnvoyFilter", "tailweight-override-host", ns)["spec"]["configPatches"]
        read = {s["header"] for p in override_host for s in p["patch"]["value"]["load_balancing_policy"]["policies"][0][
            "typed_extension_config"]["typed_config"]["override_host_sources"]}
        assert config["mutations"] == {"request_mutations": [{"remove": h} for h in sorted(read)]}
        # The filter writes the same header (it is not configured otherwise), after the removal.
        assert "header" not in wasm["spec"]["pluginConfig"]


def test_values_can_keep_incoming_headers():
    """The values docs/istio.md gives for keeping incoming headers (removal off,
    trust_incoming_header on) render as described."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    (snippet,) = [b for b in blocks if "stripIncomingOverrideHeader: false" in b]
    objects = render({**values_of("example-values"), **yaml.safe_load(snippet)})
    assert not find(objects, "EnvoyFilter", "tailweight-strip-incoming-header"), "the removal stayed"
    for wasm in wasmplugins(objects):
        assert wasm["spec"]["pluginConfig"]["trust_incoming_header"] is True
    assert len(find(objects, "EnvoyFilter", "tailweight-override-host")) == 2


def test_sidecar_bootstrap_configmap_is_the_shipped_file(objects):
    shipped = json.loads((CHART / "files" / "sidecar-bootstrap.json").read_text())
    maps = find(objects, "ConfigMap", "tailweight-sidecar-bootstrap")
    assert {m["metadata"]["namespace"] for m in maps} == {w["metadata"]["namespace"] for w in wasmplugins(objects)}
    assert all(json.loads(m["data"]["custom_bootstrap.json"]) == shipped for m in maps)
    assert "memory_allocator_manager" in shipped
    off = render({**values_of("example-values"), "sidecarBootstrap": {"enabled": False}})
    assert not find(off, "ConfigMap")


def test_only_the_bootstrap_configmaps_outlive_the_release(objects):
    """Istio's injector mounts the ConfigMap a pod names in `sidecar.istio.io/bootstrapOverride` as
    a required volume: were it deleted with the release (`helm uninstall`, a rollback or an upgrade
    that drops the namespace), no new pod of an annotated workload could start. So Helm keeps it,
    in every namespace that has one, with the name NOTES.txt tells pods to use; nothing else of
    the release is kept."""
    kept = [o for o in objects if o["metadata"].get("annotations", {}).get("helm.sh/resource-policy") == "keep"]
    maps = find(objects, "ConfigMap", "tailweight-sidecar-bootstrap")
    assert maps and kept == maps, [(o["kind"], o["metadata"]["name"]) for o in kept]
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "sidecar.istio.io/bootstrapOverride: {{ $fullname }}-sidecar-bootstrap" in notes


def test_alerts_are_the_shipped_rule_file_behind_a_toggle():
    """alerts.enabled (off by default) renders one PrometheusRule whose spec is files/alerts.yaml
    as it is (e2e/tests/test_alert_rules.py runs promtool on that file), with the labels given."""
    assert not find(render(values_of("example-values")), "PrometheusRule")
    on = render({**values_of("example-values"), "alerts": {"enabled": True, "labels": {"release": "kps"}}})
    rule = one(on, "PrometheusRule", "tailweight")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_dashboard_configmap_carries_the_dashboard_for_grafanas_sidecar():
    """Behind `dashboards.enabled`, one ConfigMap with Grafana's sidecar label holds the chart's
    dashboard JSON as it is (e2e/tests/test_dashboard.py runs its queries)."""
    shipped = json.loads((CHART / "dashboards" / "tailweight.json").read_text())
    (dashboard,) = [m for m in find(render(files=(CI_VALUES["monitoring-values"],)), "ConfigMap")
                    if m["metadata"]["name"].endswith("-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1", dashboard["metadata"]
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "mesh"}
    assert json.loads(dashboard["data"]["tailweight.json"]) == shipped
    elsewhere = render({**values_of("monitoring-values"), "dashboards": {"enabled": True, "namespace": "grafana"}})
    assert [m["metadata"]["namespace"] for m in find(elsewhere, "ConfigMap")
            if m["metadata"]["name"].endswith("-dashboard")] == ["grafana"]
    assert not [m for m in find(render(values_of("example-values")), "ConfigMap")
                if m["metadata"]["name"].endswith("-dashboard")]


def test_destination_rule_hashes_reports_by_shard(objects):
    service = one(objects, "Service", "tailweight-aggregator")
    rule = one(objects, "DestinationRule", "tailweight-aggregator")
    assert rule["spec"]["host"] == fqdn(service)
    hashing = rule["spec"]["trafficPolicy"]["loadBalancer"]["consistentHash"]
    assert hashing["httpHeaderName"] == rust_const("SHARD_HEADER")
    assert "maglev" in hashing or "ringHash" in hashing
    assert rule["spec"]["trafficPolicy"]["outlierDetection"]["maxEjectionPercent"] < 100


def test_aggregator_deployment_hardened_and_observable(objects):
    deployment = one(objects, "Deployment", "tailweight-aggregator")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["metadata"]["labels"]["sidecar.istio.io/inject"] == "true"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["spec"]["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert "--identity=xfcc" in container["args"]
    budget = next(int(a.split("=")[1]) for a in container["args"] if a.startswith("--memory-limit-mib="))
    assert budget < int(container["resources"]["limits"]["memory"].removesuffix("Mi"))
    labels = pod["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget", "AuthorizationPolicy", "PeerAuthentication"):
        selector = one(objects, kind, "tailweight-aggregator")["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert selector.items() <= labels.items(), (kind, selector)


def test_aggregator_takes_mtls_only(objects):
    """PeerAuthentication STRICT on the aggregator's pods: a caller without a sidecar cannot reach
    it (and so cannot name a principal in x-forwarded-client-cert)."""
    peer = one(objects, "PeerAuthentication", "tailweight-aggregator")
    assert peer["spec"]["mtls"] == {"mode": "STRICT"} and "portLevelMtls" not in peer["spec"]
    assert peer["metadata"]["namespace"] == one(objects, "Deployment")["metadata"]["namespace"]


def test_attestations_bound_to_the_senders_address_by_default_and_off_by_switch():
    """By default (with attestations) the aggregator's own inbound sidecar, on its report port and
    before every other HTTP filter, overwrites x-tailweight-sender-address with the connection's
    own peer address (DIRECT: x-forwarded-for cannot move it), and the aggregator reads it
    (--attest-address header:...). aggregator.senderAddress.enabled=false, or no attestations:
    neither, so the aggregator keeps its default (unbound)."""
    base = values_of("monitoring-values")
    objects = render(base)
    deployment = one(objects, "Deployment", "tailweight-aggregator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--attest-address=header:x-tailweight-sender-address" in container["args"], container["args"]
    envoyfilter = one(objects, "EnvoyFilter", "tailweight-aggregator-sender-address")
    assert envoyfilter["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    selector = envoyfilter["spec"]["workloadSelector"]["labels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (patch,) = envoyfilter["spec"]["configPatches"]
    report_port = next(p for p in one(objects, "Service", "tailweight-aggregator")["spec"]["ports"]
                       if p["name"] == "http")
    assert patch["applyTo"] == "HTTP_FILTER" and patch["patch"]["operation"] == "INSERT_FIRST"
    assert patch["match"] == {"context": "SIDECAR_INBOUND", "listener": {
        "portNumber": report_port["port"],
        "filterChain": {"filter": {"name": "envoy.filters.network.http_connection_manager"}}}}
    (mutation,) = patch["patch"]["value"]["typed_config"]["mutations"]["request_mutations"]
    assert mutation == {"append": {
        "header": {"key": "x-tailweight-sender-address", "value": "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%"},
        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}}
    renamed = render({**base, "aggregator": {**base.get("aggregator", {}), "senderAddress": {"header": "x-peer"}}})
    (container,) = one(renamed, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--attest-address=header:x-peer" in container["args"]
    for off in ({"aggregator": {**base.get("aggregator", {}), "senderAddress": {"enabled": False}}},
                {"attestations": {"enabled": False}}):
        objects = render({**base, **off})
        (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
        assert not [a for a in container["args"] if a.startswith("--attest-address")], (off, container["args"])
        assert not find(objects, "EnvoyFilter", "tailweight-aggregator-sender-address"), off


def test_authorization_policy_admits_the_opted_in_namespaces(objects):
    policy = one(objects, "AuthorizationPolicy", "tailweight-aggregator")["spec"]
    assert policy["action"] == "ALLOW"
    reports = policy["rules"][0]
    assert {"methods": ["POST"], "paths": ["/v1/report"]} in [t["operation"] for t in reports["to"]]
    opted_in = {w["metadata"]["namespace"] for w in wasmplugins(objects)}
    assert set(reports["from"][0]["source"]["namespaces"]) == opted_in
    # Nothing else may POST but attestations (from the services' namespaces, see
    # test_attest_clusters_are_generated_from_the_services_list): every other rule is read-only.
    for rule in policy["rules"][1:]:
        assert all(t["operation"]["methods"] == ["GET"] or t["operation"]["paths"] == ["/v1/attest"]
                   for t in rule["to"]), rule
    assert json.dumps(policy).count("/v1/report") == 1 and json.dumps(policy).count("/v1/attest") == 1


def test_weights_readers_may_only_read():
    objects = render({**values_of("example-values"),
                      "aggregator": {"weightsReaders": {"namespaces": ["ops"], "principals": ["spiffe://x/ns/a/sa/b"]}}})
    rules = one(objects, "AuthorizationPolicy")["spec"]["rules"]
    (readers,) = [r for r in rules if any(s["source"].get("namespaces") == ["ops"] for s in r.get("from", []))]
    assert readers["from"] == [{"source": {"namespaces": ["ops"]}}, {"source": {"principals": ["spiffe://x/ns/a/sa/b"]}}]
    assert readers["to"] == [{"operation": {"methods": ["GET"], "paths": ["/v1/weights"]}}]


# ---------------------------------------------------------------------------------------------------
# Bad values are refused at install, with a message naming them


@pytest.mark.parametrize("values,message", [
    ({"services": [{"name": "cart", "namespace": "shop", "port": 8080, "clinets": ["web"]}]},
     "at '/services/0': additional properties 'clinets' not allowed"),
    ({"aggregator": {"replica": 3}}, "at '/aggregator': additional properties 'replica' not allowed"),
    ({"filter": {"explore_ratio": 0.1}}, "at '/filter': additional properties 'explore_ratio' not allowed"),
    ({"services": [{"name": "cart", "namespace": "shop", "port": "http"}]}, "at '/services/0/port': got string"),
    ({"services": [{"name": "cart", "port": 8080}]}, "missing property 'namespace'"),
    ({"module": {"source": "http", "http": {"url": "https://x/f.wasm"}}}, "at '/module/http/sha256'"),
    ({"module": {"source": "ftp"}}, "at '/module/source': value must be one of 'oci', 'http', 'file'"),
    ({"module": {"oci": {"digest": "sha256:abc"}}}, "at '/module/oci/digest'"),
    ({"aggregator": {"identity": "nobody"}}, "at '/aggregator/identity'"),
    ({"monitoring": {"enabled": "yes"}}, "at '/monitoring/enabled': got string, want boolean"),
    ({"aggregator": {"memoryLimitMiB": 300}}, "aggregator.memoryLimitMiB (300) must be below"),
    ({"services": [{"name": "cart", "namespace": "shop", "port": 8080}] * 2}, "shop/cart:8080 is listed twice"),
], ids=["typo-in-service", "typo-in-aggregator", "snake-case-filter-key", "port-type", "no-namespace",
        "http-without-sha256", "unknown-source", "bad-digest", "identity", "bool-type", "budget-over-limit",
        "service-twice"])
def test_bad_values_refused_with_a_clear_message(values, message):
    r = template(CHART, values, check=False)
    assert r.returncode != 0, f"accepted: {values}"
    assert message in r.stderr, r.stderr


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
# application's override header (docs/istio.md "The EnvoyFilters"), so that caveat stays, once
# for each of them and for nothing else.
ENVOYFILTER_CAVEAT = ("IST0133", "EnvoyFilter exposes internal implementation details")


@pytest.mark.parametrize("values", list(CI_VALUES), ids=list(CI_VALUES))
def test_istioctl_analyze_finds_nothing_but_the_envoyfilter_caveat(values, tmp_path):
    objects = render(files=(CI_VALUES[values],))
    monitors = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}  # not Istio's: istioctl cannot know their CRDs
    envoyfilters = sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in find(objects, "EnvoyFilter"))
    messages = istioctl_analyze(tmp_path, yaml.safe_dump_all([o for o in objects if o["kind"] not in monitors]))
    unexplained = [m for m in messages
                   if (m["code"], m["message"].split(": ", 1)[-1][:len(ENVOYFILTER_CAVEAT[1])]) != ENVOYFILTER_CAVEAT
                   or not m["origin"].startswith("EnvoyFilter ")]
    assert unexplained == [], json.dumps(unexplained, indent=1)
    # The caveats themselves show the analysis saw our objects (an empty answer could mean it saw none).
    assert sorted(m["origin"].split(" ", 1)[1] for m in messages) == envoyfilters, messages


def test_every_envoyfilter_has_an_explicit_priority(objects):
    """Released istioctl versions count MERGE as a relative operation and warn (IST0151) without a
    priority; the pinned master counts only REMOVE, REPLACE and INSERT_*. The priority is set
    either way."""
    filters = find(objects, "EnvoyFilter")
    assert filters and all(isinstance(f["spec"].get("priority"), int) and f["spec"]["priority"] != 0
                           for f in filters), filters


def test_istioctl_analyze_checks_envoyfilter_priorities(tmp_path):
    """The analyzer above is live for IST0151: our EnvoyFilter with a relative operation (REMOVE)
    draws it without a priority, and not with ours."""
    envoyfilter = one(render(files=(CI_VALUES["monitoring-values"],)), "EnvoyFilter", "tailweight-override-host")
    for patch in envoyfilter["spec"]["configPatches"]:
        patch["patch"] = {"operation": "REMOVE"}
    with_priority = istioctl_analyze(tmp_path, yaml.safe_dump(envoyfilter))
    del envoyfilter["spec"]["priority"]
    without = istioctl_analyze(tmp_path, yaml.safe_dump(envoyfilter))
    assert "IST0151" in [m["code"] for m in without], without
    assert "IST0151" not in [m["code"] for m in with_priority], with_priority


# ---------------------------------------------------------------------------------------------------
# docs/getting-started.md: each command names the e2e test that runs it


def test_getting_started_names_tests_that_exist():
    """Every test the getting-started page says runs one of its commands exists, and its shard-key
    lines are the ones test_istio_tailweight takes from docs/istio.md and runs."""
    page = (REPO / "docs" / "getting-started.md").read_text()
    named = set(re.findall(r"`(?:test_istio_tailweight\.py::)?(test_[a-z_]+)`", page))
    tests = [*Path(__file__).parent.glob("test_*.py"), *(REPO / "e2e" / "tests").glob("test_*.py")]
    defined = {name for f in tests for name in re.findall(r"^def (test_[a-z_]+)\(", f.read_text(), re.M)}
    assert len(named) >= 6 and named <= defined, named - defined
    assert "helm install tailweight oci://" in page and "helm uninstall tailweight" in page

    def key_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith(("h=", "KEY="))]
    assert key_lines(page) == key_lines(DOCS.read_text()) and len(key_lines(page)) == 2


# ---------------------------------------------------------------------------------------------------
# module.kind native with module.native.loadBalancer: the .so is the steered clusters' policy


def test_native_load_balancer_replaces_override_host_on_every_steered_cluster():
    base = values_of("example-values")
    native = {"kind": "native", "native": {"path": "/opt/tw/libtailweight_native.so", "loadBalancer": True}}
    objects = render({**base, "module": native})
    filters = find(objects, "EnvoyFilter", "tailweight-native")
    assert filters, "the native filter is rendered"
    for envoyfilter in find(objects, "EnvoyFilter", "tailweight-override-host"):
        ns = envoyfilter["metadata"]["namespace"]
        (native_filter,) = [f for f in filters if f["metadata"]["namespace"] == ns]
        clusters = json.loads(native_filter["spec"]["configPatches"][0]["patch"]["value"]["typed_config"]
                              ["filter_config"]["value"])["clusters"]
        patches = envoyfilter["spec"]["configPatches"]
        assert len(patches) == len(clusters)
        for patch in patches:
            (policy,) = patch["patch"]["value"]["load_balancing_policy"]["policies"]
            typed = policy["typed_extension_config"]
            assert typed["name"] == "envoy.load_balancing_policies.dynamic_modules"
            config = typed["typed_config"]
            assert config["lb_policy_name"] == "tailweight" and config["dynamic_module_config"]["do_not_close"]
            assert config["dynamic_module_config"]["module"]["local"]["filename"] == native["native"]["path"]
    # Off by default, and off for the Wasm module whatever it says: override_host.
    for module in ({"kind": "native"}, {"kind": "wasm", "native": {"loadBalancer": True}}):
        for envoyfilter in find(render({**base, "module": module}), "EnvoyFilter", "tailweight-override-host"):
            for patch in envoyfilter["spec"]["configPatches"]:
                (policy,) = patch["patch"]["value"]["load_balancing_policy"]["policies"]
                assert policy["typed_extension_config"]["name"] == "envoy.load_balancing_policies.override_host"


def test_native_load_balancer_refuses_out_of_band_health_checks():
    values = {**values_of("example-values"), "module": {"kind": "native", "native": {"loadBalancer": True}},
              "filter": {"healthCheckPath": "/healthz"}}
    r = template(CHART, values, check=False)
    assert r.returncode != 0 and "module.native.loadBalancer" in r.stderr, r.stderr
