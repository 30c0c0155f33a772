"""Envoy bootstrap configs for one client sidecar per policy (the benchmark harness and the filter's
own e2e tests use the same renderer). Pure functions: they return YAML text and touch nothing.

Policies (docs/scenario.md): round_robin, least_request, cswrr_orca, operator (weighted
least_request on the weights of the EDS resource), tailweight_local and tailweight (the wasm filter
before the router, override_host LB with fallback least_request, the override header stripped again
in the cluster's upstream filters; `tailweight` also has the `tailweight_aggregator` cluster the
filter reports to), tailweight_native_local and tailweight_native (the same sidecar code as an Envoy
dynamic module, libtailweight_native.so: it sets each stream's upstream override host, so the
cluster keeps least_request and no header is written), and tailweight_native_lb (the same module as
the cluster's load-balancing policy too: the filter learns, the policy picks; local only).

Like an Istio sidecar's outbound cluster and route: Istio's circuit-breaker thresholds (all at
2^32 - 1), its default route retry policy when asked (`retries`), HTTP/2 to the backends for gRPC
(`protocol="grpc"`), endpoints from a file-based EDS resource when given one (`eds_path`).
"""
import copy
import json
from collections.abc import Sequence
from pathlib import Path

import yaml

from .procs import write_atomically

# The native shell's policies (the dynamic module instead of the Wasm filter); those whose cluster's
# load-balancing policy is the module too (native/src/lb_hooks.rs).
NATIVE_LB_POLICIES = ("tailweight_native_lb",)
NATIVE_POLICIES = ("tailweight_native_local", "tailweight_native", *NATIVE_LB_POLICIES)
POLICIES = ("round_robin", "least_request", "cswrr_orca", "operator", "tailweight_local", "tailweight",
            "tailweight_stamps", *NATIVE_POLICIES)
# Policies whose filters report to the aggregator; `tailweight_stamps` also reads the load stamps the
# destinations' sidecars write (render_server_envoy with STAMPING_SERVER_CONFIG).
REPORTING_POLICIES = ("tailweight", "tailweight_stamps", "tailweight_native")
CLUSTER = "backends"
# The client filter's stamp settings under `tailweight_stamps`: the simulator's best configuration
# (sim/README.md, "Closing the gap"): stamps 20 ms, read while own evidence is not rich
# (`load_stamp_max_fresh_share`: the filter's default), and only from CLUSTER (whose destinations'
# sidecars write them: the filter reads no other cluster's).
STAMP_READING = {"load_stamp_max_age_ms": 20, "load_stamp_clusters": [CLUSTER]}
# The filter configuration of a destination's sidecar that writes load stamps.
STAMPING_SERVER_CONFIG = {"role": "server"}
LOCAL_APP_CLUSTER = "local_app"
AGGREGATOR_CLUSTER = "tailweight_aggregator"
LISTENER = "ingress"
OVERRIDE_HEADER = "x-gateway-destination-endpoint"
PROTOCOLS = ("http", "grpc")

# Istio's default route retry policy (pilot/pkg/networking/core/route/retry/retry.go, DefaultPolicy):
# `unavailable` and `cancelled` are gRPC statuses; `retriable-status-codes` lists none by default, so
# an HTTP 503 is not retried. previous_hosts makes a retry pick another host (up to 5 tries).
ISTIO_RETRY_POLICY = {
    "retry_on": "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
    "num_retries": 2,
    "retry_host_predicate": [{
        "name": "envoy.retry_host_predicates.previous_hosts",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
    }],
    "host_selection_retry_max_attempts": 5,
}
# Istio's getDefaultCircuitBreakerThresholds (cluster_traffic_policy.go): Envoy's default of 3
# retries in flight per cluster turns pod churn into 503s, so Istio lifts every limit.
_UNLIMITED = 2**32 - 1
ISTIO_CIRCUIT_BREAKERS = {"thresholds": [{
    "max_connections": _UNLIMITED, "max_pending_requests": _UNLIMITED, "max_requests": _UNLIMITED,
    "max_retries": _UNLIMITED, "track_remaining": True}]}

Endpoint = str | tuple[str, int]

_HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_ROUTER = {"name": "envoy.filters.http.router",
           "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
_LB = "envoy.load_balancing_policies."
_LB_TYPE = "type.googleapis.com/envoy.extensions.load_balancing_policies."


def _address(endpoint: Endpoint) -> dict:
    if isinstance(endpoint, str):
        host, _, port = endpoint.rpartition(":")
        endpoint = (host, int(port))
    host, port = endpoint
    return {"socket_address": {"address": host, "port_value": int(port)}}


def _lb(name: str, message: str, **config) -> dict:
    return {"policies": [{"typed_extension_config": {
        "name": _LB + name,
        "typed_config": {"@type": f"{_LB_TYPE}{name}.v3.{message}", **config},
    }}]}


def least_request_lb() -> dict:
    """Envoy LEAST_REQUEST, choice_count 2 (P2C on local in-flight; weighted EDF when weights differ)."""
    return _lb("least_request", "LeastRequest")


def native_lb(module_path: str | Path) -> dict:
    """The native shell as the cluster's load-balancing policy (the same file as its filter: Envoy
    loads it once, so the policy reads what the filter learns)."""
    return _lb("dynamic_modules", "DynamicModulesLoadBalancerConfig",
               dynamic_module_config={"module": {"local": {"filename": str(Path(module_path).resolve())}},
                                      "do_not_close": True},
               lb_policy_name="tailweight")


def lb_policy(policy: str, cswrr_blackout_s: float = 1.0, cswrr_update_s: float = 0.5,
              native_path: str | Path | None = None) -> dict:
    if policy in NATIVE_LB_POLICIES:
        if native_path is None:
            raise ValueError(f"policy {policy} needs native_path (build it with `make native`)")
        return native_lb(native_path)
    if policy == "round_robin":
        return _lb("round_robin", "RoundRobin")
    if policy in ("least_request", "operator"):
        return least_request_lb()
    if policy == "cswrr_orca":
        # Benchmark settings (Envoy defaults: blackout 10 s, update 1 s); weights = qps / utilisation.
        return _lb("client_side_weighted_round_robin", "ClientSideWeightedRoundRobin",
                   blackout_period=f"{cswrr_blackout_s}s", weight_update_period=f"{cswrr_update_s}s")
    if policy in NATIVE_POLICIES:
        return least_request_lb()
    if policy.startswith("tailweight"):
        return _lb("override_host", "OverrideHost",
                   override_host_sources=[{"header": OVERRIDE_HEADER}],
                   fallback_policy=least_request_lb())
    raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")


def _upstream_protocol_options(protocol: str, strip_override_header: bool) -> dict:
    """The backends cluster's HTTP protocol: HTTP/1.1, or HTTP/2 cleartext for gRPC (Envoy's
    defaults: one connection per backend per worker, carrying every stream, as a sidecar does).
    With `strip_override_header`, upstream filters that remove the override header after the LB
    read it (a route-level removal would happen before the LB and break steering)."""
    options = {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http2_protocol_options": {}} if protocol == "grpc"
        else {"http_protocol_options": {}},
    }
    if strip_override_header:
        options["http_filters"] = [
            {"name": "envoy.filters.http.header_mutation", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
                "mutations": {"request_mutations": [{"remove": OVERRIDE_HEADER}]}}},
            {"name": "envoy.filters.http.upstream_codec", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}},
        ]
    return {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": options}


def _eds_cluster(name: str, eds_path: str | Path, lb: dict) -> dict:
    """A cluster whose endpoints (and weights) come from the file-based EDS resource `eds_path`."""
    eds_path = Path(eds_path).resolve()
    return {
        "name": name, "type": "EDS", "connect_timeout": "1s", "load_balancing_policy": lb,
        "eds_cluster_config": {"eds_config": {
            "resource_api_version": "V3",
            # Envoy reloads the file when it is moved into place in this directory.
            "path_config_source": {"path": str(eds_path), "watched_directory": {"path": str(eds_path.parent)}},
        }},
    }


def _static_cluster(name: str, endpoints: Sequence[Endpoint], lb: dict | None = None) -> dict:
    cluster = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": _address(e)}} for e in endpoints]}]},
    }
    if lb is not None:
        cluster["load_balancing_policy"] = lb
    return cluster


def wasm_filter(wasm_path: str | Path, plugin_config: dict | None = None) -> dict:
    return {"name": "envoy.filters.http.wasm", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
        "config": {
            "name": "tailweight",
            "vm_config": {
                "vm_id": "tailweight",  # shared data crosses worker VMs only within one vm_id
                "runtime": "envoy.wasm.runtime.v8",
                "code": {"local": {"filename": str(Path(wasm_path).resolve())}},
            },
            "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue",
                              "value": json.dumps(plugin_config or {})},
        },
    }}


def native_filter(module_path: str | Path, plugin_config: dict | None = None) -> dict:
    """The native shell as an HTTP filter. `metrics_namespace: wasmcustom` names its metrics in
    /stats as the Wasm shell's (`wasmcustom.tailweight.<name>`; native/src/config_metrics.rs)."""
    return {"name": "envoy.filters.http.dynamic_modules", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter",
        "dynamic_module_config": {"module": {"local": {"filename": str(Path(module_path).resolve())}},
                                  "do_not_close": True, "metrics_namespace": "wasmcustom"},
        "filter_name": "tailweight",
        "filter_config": {"@type": "type.googleapis.com/google.protobuf.StringValue",
                          "value": json.dumps(plugin_config or {})},
    }}


def steers_by_header(policy: str) -> bool:
    """Whether the policy's filter steers through the override header (the Wasm shell), which the
    cluster's override_host policy reads and its upstream filters strip."""
    return policy.startswith("tailweight") and policy not in NATIVE_POLICIES


def plugin_config_for(policy: str, report_interval_ms: int = 1000, extra: dict | None = None) -> dict:
    """The filter configuration each tailweight policy runs with (`extra` overrides fields)."""
    config = {}
    if policy in REPORTING_POLICIES:
        config["aggregator"] = {"cluster": AGGREGATOR_CLUSTER, "report_interval_ms": report_interval_ms}
    if policy == "tailweight_stamps":
        config.update(STAMP_READING)
    config.update(extra or {})
    return config


def render_client_envoy(backends: Sequence[Endpoint], policy: str,
                        wasm_path: str | Path | None = None, plugin_config: dict | None = None,
                        aggregator_port: int | None = None, eds_path: str | Path | None = None,
                        node_id: str = "client", native_path: str | Path | None = None, route_timeout_s: float = 15.0,
                        cswrr_blackout_s: float = 1.0, cswrr_update_s: float = 0.5,
                        retries: bool = False, protocol: str = "http") -> str:
    """One client sidecar: listener LISTENER (HTTP/1.1 or h2c, whichever the client speaks) routing
    everything to cluster `backends`. Admin and listener bind 127.0.0.1 port 0 (envoy.start reads
    the ports Envoy got).

    backends: "ip:port" strings or (ip, port) pairs, a static endpoint list; ignored when `eds_path`
    (a file written by `write_eds`) is given, which `operator` needs. tailweight policies need
    `wasm_path` (NATIVE_POLICIES: `native_path`, the module); REPORTING_POLICIES also need
    `aggregator_port`. `plugin_config` defaults to
    plugin_config_for(policy). `retries`: Istio's default route retry policy (ISTIO_RETRY_POLICY).
    `protocol`: "http" (HTTP/1.1 to the backends) or "grpc" (HTTP/2 cleartext)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
    steering = policy.startswith("tailweight")
    native = policy in NATIVE_POLICIES
    if native and native_path is None:
        raise ValueError(f"policy {policy} needs native_path (build it with `make native`)")
    if steering and not native and wasm_path is None:
        raise ValueError(f"policy {policy} needs wasm_path (build it with `make wasm`)")
    if policy in REPORTING_POLICIES and aggregator_port is None:
        raise ValueError(f"policy {policy} needs aggregator_port")
    if policy == "operator" and eds_path is None:
        raise ValueError("policy operator needs eds_path (see write_eds)")

    lb = lb_policy(policy, cswrr_blackout_s, cswrr_update_s, native_path)
    cluster = _eds_cluster(CLUSTER, eds_path, lb) if eds_path is not None else _static_cluster(CLUSTER, backends, lb)
    cluster["circuit_breakers"] = copy.deepcopy(ISTIO_CIRCUIT_BREAKERS)
    if steers_by_header(policy) or protocol != "http":
        cluster["typed_extension_protocol_options"] = _upstream_protocol_options(protocol, steers_by_header(policy))
    clusters = [cluster]
    http_filters = []
    if steering:
        config = plugin_config if plugin_config is not None else plugin_config_for(policy)
        http_filters.append(native_filter(native_path, config) if native else wasm_filter(wasm_path, config))
        if policy in REPORTING_POLICIES:
            clusters.append(_static_cluster(AGGREGATOR_CLUSTER, [("127.0.0.1", aggregator_port)]))
    http_filters.append(copy.deepcopy(_ROUTER))
    route = {"cluster": CLUSTER, "timeout": f"{route_timeout_s}s"}
    if retries:
        route["retry_policy"] = copy.deepcopy(ISTIO_RETRY_POLICY)

    bootstrap = {
        "node": {"id": node_id, "cluster": "tailweight-bench"},
        "admin": {"address": _address(("127.0.0.1", 0))},
        "static_resources": {
            "listeners": [_http_listener(LISTENER, route, http_filters)],
            "clusters": clusters,
        },
    }
    return yaml.safe_dump(bootstrap, sort_keys=False)


def _http_listener(name: str, route: dict, http_filters: list, direction: str = "OUTBOUND") -> dict:
    """Listener `name` on 127.0.0.1 port 0 (stats under listener.<name>.*, not the address), HTTP/1.1
    or h2c, everything routed by `route` through `http_filters`; `direction` as Istio marks its
    sidecars' listeners (the filter checks its role against it)."""
    return {
        "name": name,
        "traffic_direction": direction,
        "stat_prefix": name,
        "address": _address(("127.0.0.1", 0)),
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": _HCM_TYPE,
                "stat_prefix": name,
                "route_config": {"name": "local", "virtual_hosts": [{
                    "name": "all", "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": route}],
                }]},
                "http_filters": http_filters,
            },
        }]}],
    }


def render_server_envoy(app: Endpoint, wasm_path: str | Path | None = None, plugin_config: dict | None = None,
                        node_id: str = "server", protocol: str = "http", aggregator_port: int | None = None,
                        native_path: str | Path | None = None) -> str:
    """One destination's sidecar: listener LISTENER, marked INBOUND as Istio's inbound listener is, in
    front of the application at `app` (cluster LOCAL_APP_CLUSTER, HTTP/1.1 or h2c for gRPC, Istio's
    unlimited circuit breakers); with `wasm_path`, the filter before the router, configured by
    `plugin_config` (default STAMPING_SERVER_CONFIG: it stamps every response with the endpoint's
    load), or with `native_path` the native shell so configured, else no filter; with `aggregator_port`,
    also the AGGREGATOR_CLUSTER its attestations go to."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
    cluster = _static_cluster(LOCAL_APP_CLUSTER, [app])
    cluster["circuit_breakers"] = copy.deepcopy(ISTIO_CIRCUIT_BREAKERS)
    if protocol != "http":
        cluster["typed_extension_protocol_options"] = _upstream_protocol_options(protocol, False)
    http_filters = []
    config = plugin_config if plugin_config is not None else STAMPING_SERVER_CONFIG
    if native_path is not None:
        http_filters.append(native_filter(native_path, config))
    elif wasm_path is not None:
        http_filters.append(wasm_filter(wasm_path, config))
    http_filters.append(copy.deepcopy(_ROUTER))
    route = {"cluster": LOCAL_APP_CLUSTER, "timeout": "0s"}  # the caller's sidecar owns the timeout
    return yaml.safe_dump({
        "node": {"id": node_id, "cluster": "tailweight-bench"},
        "admin": {"address": _address(("127.0.0.1", 0))},
        "static_resources": {"listeners": [_http_listener(LISTENER, route, http_filters, "INBOUND")],
                             "clusters": [cluster] + ([] if aggregator_port is None else [
                                 _static_cluster(AGGREGATOR_CLUSTER, [("127.0.0.1", aggregator_port)])])},
    }, sort_keys=False)


def render_eds(weights: dict[str, int], cluster: str = CLUSTER, version: str = "1") -> str:
    """A file-based EDS resource: endpoints "ip:port" -> load_balancing_weight (integer >= 1)."""
    lb_endpoints = []
    for endpoint, weight in weights.items():
        w = int(weight)
        if w < 1:
            raise ValueError(f"weight of {endpoint} must be >= 1, got {weight}")
        lb_endpoints.append({"endpoint": {"address": _address(endpoint)}, "load_balancing_weight": w})
    return yaml.safe_dump({"version_info": version, "resources": [{
        "@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
        "cluster_name": cluster, "endpoints": [{"lb_endpoints": lb_endpoints}],
    }]}, sort_keys=False)


def write_eds(path: str | Path, weights: dict[str, int], version: str = "1") -> None:
    """Write the EDS file atomically (temp file in the same directory, then rename) so Envoy never
    reads half a file; the rename is what its watched_directory notices."""
    write_atomically(Path(path), render_eds(weights, version=version))
