"""Envoy bootstraps of `make bench-overhead`, derived from the client sidecar config every benchmark
uses (tailweight_e2e.envoy_configs: one listener, cluster `backends` with override_host and a
least_request fallback, the override header stripped upstream), so that variants differ only in the
HTTP filter: none (no_wasm), or a wasm module with the same plugin configuration (the empty filter
ignores it). Pure functions: they return bootstrap dicts and YAML text."""
import copy
import json
from collections.abc import Sequence
from pathlib import Path

import yaml

from tailweight_e2e import envoy_configs, paths

WASM_FILTER = "envoy.filters.http.wasm"
GRPC_LISTENER = "grpc"
GRPC_CLUSTER = "grpc_backends"
_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
# The bootstrap override the Helm chart ships for sidecars (Envoy releases free heap pages): the
# file its ConfigMap carries as custom_bootstrap.json.
SIDECAR_BOOTSTRAP = paths.REPO / "charts" / "tailweight" / "files" / "sidecar-bootstrap.json"


def client(module: Path | None, backends: Sequence[str], aggregator_port: int | None = None) -> dict:
    """One sidecar: the filter `module` before the router: a Wasm module, or the native shell (a
    `.so`, on the least_request cluster it steers by override host), or None: no filter; local-only,
    or reporting to the aggregator on `aggregator_port` every second."""
    reporting = aggregator_port is not None
    if module is not None and is_native(module):
        policy = "tailweight_native" if reporting else "tailweight_native_local"
        return yaml.safe_load(envoy_configs.render_client_envoy(
            backends, policy, native_path=module, aggregator_port=aggregator_port))
    policy = "tailweight" if reporting else "tailweight_local"
    cfg = yaml.safe_load(envoy_configs.render_client_envoy(
        backends, policy, wasm_path=module or paths.WASM, aggregator_port=aggregator_port))
    if module is None:
        hcm = _hcm(_listener(cfg, envoy_configs.LISTENER))
        hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != WASM_FILTER]
    return cfg


def is_native(module: Path) -> bool:
    """Whether a variant's module is the native shell (an Envoy dynamic module), not Wasm."""
    return Path(module).suffix == ".so"


def _http_options(cluster: dict) -> dict:
    """The cluster's HTTP protocol options, HTTP/1.1 ones made if it has none (the native shell's
    cluster strips no header, so it has none)."""
    options = cluster.setdefault("typed_extension_protocol_options", {})
    return options.setdefault(_HTTP_OPTIONS, {"@type": f"type.googleapis.com/{_HTTP_OPTIONS}",
                                              "explicit_http_config": {"http_protocol_options": {}}})


def sidecar_bootstrap_override() -> dict:
    """The bootstrap fields of the chart's sidecar bootstrap override (its ConfigMap's
    custom_bootstrap.json), which pilot-agent merges into a sidecar's bootstrap."""
    return json.loads(SIDECAR_BOOTSTRAP.read_text())


def with_sidecar_bootstrap_override(cfg: dict) -> dict:
    """`cfg` with the shipped bootstrap override's top-level fields set, as Envoy's --config-yaml
    merges them (every field it sets is a message the base config does not have)."""
    out = copy.deepcopy(cfg)
    out.update(sidecar_bootstrap_override())
    return out


def with_grpc(cfg: dict, grpc_backends: Sequence[str]) -> dict:
    """`cfg` plus listener GRPC_LISTENER (same filters) routing to cluster GRPC_CLUSTER: the same
    cluster settings over `grpc_backends`, spoken to in HTTP/2."""
    cfg = copy.deepcopy(cfg)
    resources = cfg["static_resources"]
    cluster = copy.deepcopy(_cluster(cfg, envoy_configs.CLUSTER))
    cluster["name"] = cluster["load_assignment"]["cluster_name"] = GRPC_CLUSTER
    # The endpoints as the client config lists them: the same cluster rendered over grpc_backends.
    cluster["load_assignment"]["endpoints"] = _cluster(client(None, grpc_backends), envoy_configs.CLUSTER)[
        "load_assignment"]["endpoints"]
    _http_options(cluster)["explicit_http_config"] = {"http2_protocol_options": {}}
    resources["clusters"].append(cluster)
    listener = copy.deepcopy(_listener(cfg, envoy_configs.LISTENER))
    listener["name"] = listener["stat_prefix"] = GRPC_LISTENER
    hcm = _hcm(listener)
    hcm["stat_prefix"] = GRPC_LISTENER
    for vhost in hcm["route_config"]["virtual_hosts"]:
        for route in vhost["routes"]:
            route["route"]["cluster"] = GRPC_CLUSTER
    resources["listeners"].append(listener)
    return cfg


def fleet_cluster_names(count: int) -> list[str]:
    return [f"fleet_{i:02d}" for i in range(count)]


def fleet(module: Path | None, addresses: Sequence[str], clusters: int, aggregator_port: int,
          idle_timeout_s: float) -> dict:
    """A sidecar tracking `clusters` clusters that each list every one of `addresses`: the route
    splits requests evenly over them (weighted_clusters). Upstream connections close after
    `idle_timeout_s` without requests: one pool per worker, cluster and endpoint would otherwise
    keep clusters x endpoints x workers connections open (far beyond a process's descriptors)."""
    cfg = client(module, addresses, aggregator_port)
    template = _cluster(cfg, envoy_configs.CLUSTER)
    _http_options(template)["common_http_protocol_options"] = {"idle_timeout": f"{idle_timeout_s:g}s"}
    others = [c for c in cfg["static_resources"]["clusters"] if c["name"] != envoy_configs.CLUSTER]
    names = fleet_cluster_names(clusters)
    copies = []
    for name in names:
        c = copy.deepcopy(template)
        c["name"] = c["load_assignment"]["cluster_name"] = name
        copies.append(c)
    cfg["static_resources"]["clusters"] = copies + others
    for vhost in _hcm(_listener(cfg, envoy_configs.LISTENER))["route_config"]["virtual_hosts"]:
        for route in vhost["routes"]:
            timeout = route["route"]["timeout"]
            route["route"] = {"weighted_clusters": {"clusters": [{"name": n, "weight": 1} for n in names]},
                              "timeout": timeout}
    return cfg


def render(cfg: dict) -> str:
    """Bootstrap text for Envoy: JSON, which is YAML, and much quicker to write than YAML for the
    tens of thousands of endpoints of a fleet config."""
    return json.dumps(cfg)


def _listener(cfg: dict, name: str) -> dict:
    return next(x for x in cfg["static_resources"]["listeners"] if x["name"] == name)


def _cluster(cfg: dict, name: str) -> dict:
    return next(c for c in cfg["static_resources"]["clusters"] if c["name"] == name)


def _hcm(listener: dict) -> dict:
    return listener["filter_chains"][0]["filters"][0]["typed_config"]

