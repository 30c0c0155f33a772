"""Helm (built by build/build.sh from its pinned module) against the control plane's apiserver:
charts/tailweight rendered, packaged, pushed to an OCI registry and installed as a user would."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import yaml

from versions import HELM


class HelmFailed(subprocess.CalledProcessError):
    """A helm command failed; its message carries helm's own error (stderr)."""

    def __str__(self) -> str:
        return f"{super().__str__()}: {self.stderr.strip()[-2000:]}"


def run_helm(*args: str, values: dict | None = None, env: dict[str, str] | None = None, check: bool = True,
             timeout: float = 120) -> subprocess.CompletedProcess:
    """`helm args...`, with `--values -` fed `values` as YAML when given; raises HelmFailed (with
    helm's stderr) on failure when check."""
    argv = [str(HELM), *args, *(["--values", "-"] if values is not None else [])]
    r = subprocess.run(argv, input=yaml.safe_dump(values) if values is not None else None, capture_output=True,
                       text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if check and r.returncode != 0:
        raise HelmFailed(r.returncode, r.args, r.stdout, r.stderr)
    return r


def template(chart: Path | str, values: dict | None = None, files: tuple[Path, ...] = (),
             release: str = "tailweight", namespace: str = "tailweight", check: bool = True
             ) -> subprocess.CompletedProcess:
    """`helm template` (no cluster): what `helm install` would apply, or helm's refusal."""
    args = ["template", release, str(chart), "--namespace", namespace]
    for f in files:
        args += ["--values", str(f)]
    return run_helm(*args, values=values, check=check)


def package_names(archive: Path) -> set[str]:
    """The file names inside a chart archive."""
    with tarfile.open(archive) as tar:
        return set(tar.getnames())


class Helm:
    """Helm with a kubeconfig and private HELM_{CONFIG,CACHE,DATA}_HOME under `home` (never the
    user's ~/.config/helm)."""

    def __init__(self, kubeconfig: Path, home: Path):
        self.kubeconfig = kubeconfig
        self.home = home
        self.env = {f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CONFIG", "CACHE", "DATA")}
        self.env["KUBECONFIG"] = str(kubeconfig)

    def run(self, *args: str, values: dict | None = None, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess:
        return run_helm(*args, values=values, env=self.env, check=check, timeout=timeout)

    def install(self, release: str, chart: str, namespace: str, values: dict, version: str | None = None,
                upgrade: bool = False) -> subprocess.CompletedProcess:
        """`helm install ... --create-namespace` (or `helm upgrade --install` with `upgrade`), as a
        user runs it. No --wait: nothing here runs Deployments (no kubelet); the tests wait for what
        they need."""
        verb = ["upgrade", "--install"] if upgrade else ["install", "--create-namespace"]
        extra = ["--version", version] if version else []
        plain = ["--plain-http"] if chart.startswith("oci://127.0.0.1") else []
        return self.run(*verb, release, chart, "--namespace", namespace, *extra, *plain, values=values)

    def uninstall(self, release: str, namespace: str) -> subprocess.CompletedProcess:
        return self.run("uninstall", release, "--namespace", namespace)

    def manifest(self, release: str, namespace: str) -> list[dict]:
        """The objects of the release as installed (`helm get manifest`)."""
        text = self.run("get", "manifest", release, "--namespace", namespace).stdout
        return [d for d in yaml.safe_load_all(text) if d]

    def package(self, chart: Path, destination: Path) -> Path:
        """`helm package`: the chart archive (<name>-<version>.tgz) in destination."""
        destination.mkdir(parents=True, exist_ok=True)
        out = self.run("package", str(chart), "--destination", str(destination)).stdout
        return Path(out.strip().rsplit(": ", 1)[-1])

    def push(self, archive: Path, registry: str) -> str:
        """`helm push` of the archive to oci://<registry>/charts (plain HTTP: a loopback registry);
        returns the chart's oci:// reference (without version)."""
        self.run("push", str(archive), f"oci://{registry}/charts", "--plain-http")
        name = archive.name.rsplit("-", 1)[0]
        return f"oci://{registry}/charts/{name}"
