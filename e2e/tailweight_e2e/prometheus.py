"""A real Prometheus (Debian package) on 127.0.0.1 scraping given targets, and its query API.

Prometheus cannot report a port-0 bind, so it listens on a reserved port (procs.reserve_port),
started again on a fresh one should that port be taken after all."""
from collections.abc import Mapping, Sequence
from pathlib import Path

import requests

from . import paths
from .procs import ProcGroup, retry_port_clash, wait_http


class Prometheus:
    def __init__(self, group: ProcGroup, scrape_targets: Sequence[str], workdir: Path,
                 scrape_interval_s: float = 1.0, job: str = "targets",
                 more_jobs: Sequence[tuple[str, str, Sequence[str]]] = (),
                 target_labels: Mapping[str, Mapping[str, str]] | None = None):
        """`scrape_targets` ("host:port") at /metrics as job `job`; `more_jobs`: (job, metrics path,
        targets) each, e.g. Envoys' /stats/prometheus; `target_labels`: per target, labels its series
        get (e.g. the namespace and pod the Prometheus Operator's monitors add)."""
        binary = paths.prometheus()
        if not binary.exists():
            raise FileNotFoundError(f"{binary} is missing: run `make deps`")
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        jobs = [(job, "/metrics", scrape_targets), *more_jobs]
        target_labels = target_labels or {}

        def static_config(target: str) -> str:
            labels = ", ".join(f"{k}: {v!r}" for k, v in target_labels.get(target, {}).items())
            return f"{{targets: [{target!r}], labels: {{{labels}}}}}"
        config.write_text(
            f"global: {{scrape_interval: {scrape_interval_s:g}s, evaluation_interval: {scrape_interval_s:g}s}}\n"
            "scrape_configs:\n" + "".join(
                f"  - job_name: {name}\n    metrics_path: {path}\n"
                f"    static_configs: [{', '.join(static_config(t) for t in targets)}]\n"
                for name, path, targets in jobs))

        def start():
            port = group.reserve_port()
            proc = group.start("prometheus", [
                binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=2h",
                "--log.level=warn"])
            wait_http(f"http://127.0.0.1:{port}/-/ready", 60, proc)
            return port, proc

        self.port, self.proc = retry_port_clash(start)
        self.url = f"http://127.0.0.1:{self.port}"

    def query(self, promql: str) -> list[dict]:
        """An instant query's result vector."""
        r = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        body = r.json()
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus query {promql!r}: {body}")
        return body["data"]["result"]
