"""Istio resources that give loopback processes a place in the mesh: services over
WorkloadEntries, Sidecar resources that bind real listeners without iptables."""

from __future__ import annotations

from typing import Any

import yaml

from loopback import LOCALHOST


class MeshResources:
    """Part of ControlPlane: applies through KubeApi's `self.apply_yaml`."""

    def apply_loopback_service(self, namespace: str, host: str, port: int,
                               endpoints: dict[str, tuple[str, int]],
                               labels: dict[str, str]) -> None:
        """A mesh service `host:port` (HTTP) whose endpoints are loopback addresses.

        EndpointSlices refuse 127.0.0.0/8, so the service is a ServiceEntry selecting WorkloadEntries
        (name -> (ip, target port)); without the tlsMode label the client talks plaintext to them.
        """
        docs = [{
            "apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
            "metadata": {"name": host.split(".")[0], "namespace": namespace},
            "spec": {"hosts": [host], "location": "MESH_INTERNAL", "resolution": "STATIC",
                     "ports": [{"number": port, "name": "http", "protocol": "HTTP"}],
                     "workloadSelector": {"labels": labels}},
        }]
        for name, (ip, target_port) in endpoints.items():
            docs.append({
                "apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"address": ip, "labels": labels, "ports": {"http": target_port}},
            })
        self.apply_yaml(yaml.safe_dump_all(docs))

    def apply_sidecar_resource(self, namespace: str, name: str, selector: dict[str, str],
                               bind_ip: str, egress_ports: dict[int, str],
                               hosts: tuple[str, ...] = ("./*",)) -> None:
        """A Sidecar with captureMode NONE: Envoy binds a real outbound listener bind_ip:port for
        each of `egress_ports` (port -> Istio protocol, e.g. {8080: "HTTP", 9090: "GRPC"}).

        There is no iptables redirection here, so listeners must bind an address we can dial.
        """
        egress = [{"port": {"number": port, "protocol": protocol, "name": f"{protocol.lower()}-{port}"},
                   "bind": bind_ip, "captureMode": "NONE", "hosts": list(hosts)}
                  for port, protocol in egress_ports.items()]
        self.apply_yaml(yaml.safe_dump({
            "apiVersion": "networking.istio.io/v1", "kind": "Sidecar",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"workloadSelector": {"labels": selector}, "egress": egress},
        }))

    def apply_ingress_sidecar_resource(self, namespace: str, name: str, selector: dict[str, str],
                                       bind_ip: str, port: int, app_port: int,
                                       egress_hosts: tuple[str, ...] = ("istio-system/*",)) -> None:
        """A Sidecar with an inbound listener bind_ip:port (mTLS or plaintext, then the namespace's
        AuthorizationPolicies) forwarding to the app at 127.0.0.1:app_port; captureMode NONE."""
        self.apply_yaml(yaml.safe_dump({
            "apiVersion": "networking.istio.io/v1", "kind": "Sidecar",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "workloadSelector": {"labels": selector},
                "ingress": [{"port": {"number": port, "protocol": "HTTP", "name": "http"},
                             "bind": bind_ip, "captureMode": "NONE",
                             "defaultEndpoint": f"{LOCALHOST}:{app_port}"}],
                "egress": [{"hosts": list(egress_hosts)}],
            },
        }))

    def apply_workload_entry(self, namespace: str, name: str, ip: str, labels: dict[str, str],
                             ports: dict[str, int], service_account: str | None = None,
                             mtls: bool = False) -> None:
        """A WorkloadEntry at a loopback ip: Kubernetes Services whose selector matches `labels`
        get it as an endpoint (EndpointSlices refuse loopback addresses). With mtls, callers'
        sidecars use Istio mTLS to it (tlsMode label) and check service_account's identity."""
        labels = {**labels, **({"security.istio.io/tlsMode": "istio"} if mtls else {})}
        spec: dict[str, Any] = {"address": ip, "labels": labels, "ports": ports}
        if service_account:
            spec["serviceAccount"] = service_account
        self.apply_yaml(yaml.safe_dump({
            "apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry",
            "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec,
        }))
