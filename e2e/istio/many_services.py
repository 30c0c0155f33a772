"""A namespace whose client sidecar calls N services, each with its own outbound listener and
cluster, with or without tailweight: what bench_startup.py times and test_istio_wasm_vms.py checks.

Services are Kubernetes Services `svc-<i>` on port FIRST_PORT + i, all selecting one WorkloadEntry
(nothing listens behind it: these sidecars only start, they carry no traffic). The client's Sidecar
resource gives it one outbound listener per service port on its pod IP (captureMode NONE), so N
services make N listeners and N clusters. With tailweight, the namespace is opted in through
the chart (charts/tailweight) for all N services (the module from `file://`), as a user would.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

import tailweight_mesh as tm
from cluster import ControlPlane
from sidecars import Sidecar

FIRST_PORT = 9101
APP_LABEL = {"app": "many-services-backend"}


@dataclass
class ManyServices:
    """One namespace: `count` services and the client pod that calls them."""
    namespace: str
    count: int
    client_ip: str
    tailweight: bool

    @property
    def ports(self) -> list[int]:
        return [FIRST_PORT + i for i in range(self.count)]

    def start_client(self, cp: ControlPlane, concurrency: int) -> Sidecar:
        """Runs the client's sidecar (pilot-agent + Envoy) until ready; its start-up times are in
        `startup_s`."""
        return cp.start_sidecar(self.namespace, "client", ip=self.client_ip, labels={"app": "client"},
                                concurrency=concurrency)

    def listeners(self, sidecar: Sidecar) -> list[str]:
        """The outbound listeners of the services (ip_port) the sidecar has, in port order."""
        active = sidecar.listeners()
        return [name for port in self.ports if (name := f"{self.client_ip}_{port}") in active]


def apply(cp: ControlPlane, namespace: str, count: int, client_ip: str, endpoint_ip: str,
          tailweight: bool, hosts: tuple[str, ...] = ("./*",)) -> ManyServices:
    """Creates `namespace` with `count` services, the client's Sidecar resource (egress `hosts`),
    and with `tailweight` the opt-in of all of them (WasmPlugin + EnvoyFilters, no aggregator)."""
    cp.create_namespace(namespace)
    services = [{"apiVersion": "v1", "kind": "Service",
                 "metadata": {"name": f"svc-{i}", "namespace": namespace},
                 "spec": {"selector": APP_LABEL,
                          "ports": [{"name": f"http-{port}", "port": port, "targetPort": "http"}]}}
                for i, port in enumerate(FIRST_PORT + i for i in range(count))]
    cp.apply_yaml(yaml.safe_dump_all(services))
    cp.apply_workload_entry(namespace, "backend", endpoint_ip, APP_LABEL, ports={"http": 8080})
    many = ManyServices(namespace, count, client_ip, tailweight)
    cp.apply_sidecar_resource(namespace, "client", {"app": "client"}, bind_ip=client_ip,
                              egress_ports={port: "HTTP" for port in many.ports}, hosts=hosts)
    if tailweight:
        opt_in(cp, many)
    return many


def opt_in(cp: ControlPlane, many: ManyServices, filter_settings: dict | None = None) -> None:
    """tailweight for all the namespace's services: the chart installed as release `tailweight` of
    the namespace with its `services` list and no aggregator (WasmPlugin + EnvoyFilters),
    `filter_settings` as the chart's `filter` values."""
    destinations = [(f"svc-{i}", port) for i, port in enumerate(many.ports)]
    values = tm.chart_values(f"file://{tm.WASM}", destinations, filter_settings, namespace=many.namespace,
                             aggregator=False)
    cp.helm.install(tm.RELEASE, str(tm.CHART), many.namespace, values, upgrade=True)


def v8_vms(sidecar: Sidecar) -> dict[str, int]:
    """Envoy's V8 VM gauges/counters: `active` (alive now) and `created` (since start)."""
    stats = sidecar.stats("wasm.envoy.wasm.runtime.v8")
    return {name.rsplit(".", 1)[-1]: int(value) for name, value in stats.items()
            if name.rsplit(".", 1)[-1] in ("active", "created")}
