"""kubectl against the control plane's apiserver, and the API objects a pretend pod needs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from loopback import LOCALHOST
from tailweight_e2e.procs import wait_for


class KubectlFailed(subprocess.CalledProcessError):
    """A kubectl command failed; its message carries kubectl's own error (stderr)."""

    def __init__(self, r: subprocess.CompletedProcess):
        super().__init__(r.returncode, r.args, r.stdout, r.stderr)

    def __str__(self) -> str:
        return f"{super().__str__()}: {self.stderr.strip()[-2000:]}"


class KubeApi:
    """Part of ControlPlane: kubectl with its kubeconfig (`self.kubeconfig`) and its own discovery
    cache under `self.dir`."""
    kubeconfig: Path
    dir: Path

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess:
        """kubectl against our apiserver; raises with stderr on failure when check."""
        # Own discovery cache: ~/.kube/cache is keyed by host:port, which another run may reuse.
        r = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}",
                            f"--cache-dir={self.dir / 'kubectl-cache'}", *args], input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise KubectlFailed(r)
        return r

    def get_json(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def apply_yaml(self, text: str, check: bool = True) -> subprocess.CompletedProcess:
        """Server-side apply of one or more YAML documents."""
        return self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                            input=text, check=check)

    def delete_yaml(self, text: str) -> None:
        self.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=text)

    def delete(self, kind: str, namespace: str, *names: str) -> None:
        self.kubectl("delete", kind, "-n", namespace, "--ignore-not-found", "--wait=false", *names)

    def create_namespace(self, name: str) -> None:
        self.apply_yaml(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": name}}))

    def create_service_account(self, namespace: str, name: str) -> None:
        self.apply_yaml(yaml.safe_dump({"apiVersion": "v1", "kind": "ServiceAccount",
                                        "metadata": {"name": name, "namespace": namespace}}))

    def create_pod(self, namespace: str, name: str, ip: str, labels: dict[str, str],
                   service_account: str) -> None:
        """A Pod object that looks Running at ip (no kubelet: we write its status ourselves)."""
        self.create_service_account(namespace, service_account)
        self.apply_yaml(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"serviceAccountName": service_account, "nodeName": "loopback",
                     "containers": [{"name": "app", "image": "tailweight.invalid/none"}]},
        }))
        status = {"status": {
            "phase": "Running", "hostIP": LOCALHOST, "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True"},
                           {"type": "ContainersReady", "status": "True"}],
        }}
        self.kubectl("patch", "pod", name, "-n", namespace, "--subresource=status",
                     "--type=merge", "-p", json.dumps(status))

    def create_token(self, namespace: str, service_account: str, audience: str = "istio-ca") -> str:
        """A bound service-account token, as the kubelet would project it for istio-agent."""
        return self.kubectl("create", "token", service_account, "-n", namespace,
                            f"--audience={audience}", "--duration=2h").stdout.strip()

    def root_cert(self, namespace: str) -> str:
        """The mesh root CA, as istiod publishes it into every namespace (istio-ca-root-cert)."""
        def get():
            cm = self.get_json("configmap", "istio-ca-root-cert", "-n", namespace)
            return cm["data"]["root-cert.pem"]
        return wait_for(get, 30, f"istio-ca-root-cert in {namespace}")
