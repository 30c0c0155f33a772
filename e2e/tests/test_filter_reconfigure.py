"""A client Envoy's filter reconfigured 20 times under load, right after a backend left the endpoint
set. Each listener update (file-based LDS, a changed filter configuration) makes new root contexts,
each a new worker with a new shared-data slot; the old ones go when the old filter chain has
drained (1 s here). What a gone worker last published must not stay in this Envoy's reports: after
the endpoint ttl, the reports list only the endpoints still in the set. And a new worker takes over
a gone one's slot: more reconfigurations, once the earlier workers are gone, add no slot."""
import json
import threading
import time

import pytest
import yaml

from harness import emulator as emu
from harness import fortio
from tailweight_e2e import envoy, envoy_configs, paths
from tailweight_e2e.procs import wait_for, write_atomically
from tailweight_e2e.stub_server import Reply, Request, StubServer

TTL_MS = 3000
RECONFIGURATIONS = 20
MORE_RECONFIGURATIONS = 10


class Reports:
    """Stands in for the aggregator: keeps the endpoints of each report, answers with no views."""

    def __init__(self):
        self.lock, self.seen = threading.Lock(), []
        self.server = StubServer(self._report, name="reports").start()

    def _report(self, request: Request) -> Reply:
        report = json.loads(request.body)
        endpoints = {e["address"] for c in report["clusters"] for e in c["endpoints"]}
        with self.lock:
            self.seen.append((time.monotonic(), endpoints))
        return Reply(body=b'{"version":1,"ttl_ms":3000,"clusters":[]}')

    def since(self, t: float) -> list[set[str]]:
        with self.lock:
            return [endpoints for at, endpoints in self.seen if at > t]


def plugin_config(k: int, aggregator_port: int) -> dict:
    # Only explore_ratio changes from one configuration to the next: enough for a new root context.
    return envoy_configs.plugin_config_for("tailweight", report_interval_ms=250, extra={
        "endpoint_ttl_ms": TTL_MS, "stale_after_ms": 1000, "explore_ratio": 0.01 + k / 10_000})


def set_plugin_config(listener: dict, config: dict) -> None:
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    for f in manager["http_filters"]:
        if f["name"] == "envoy.filters.http.wasm":
            f["typed_config"]["config"]["configuration"]["value"] = json.dumps(config)
        if f["name"] == "envoy.filters.http.dynamic_modules":
            f["typed_config"]["filter_config"]["value"] = json.dumps(config)


# The native shell likewise: each listener update makes a new filter config with a plugin per
# worker and its own ticker thread; the old one stops its thread when Envoy destroys it.
@pytest.mark.parametrize("policy", ["tailweight", "tailweight_native"])
def test_reconfigurations_leave_no_endpoint_of_a_gone_worker_in_the_reports(group, tmp_path, policy):
    backends = emu.start(group, [emu.BackendSettings(workers=4, base_ms=2.0) for _ in range(3)])
    reports = Reports()
    try:
        eds, lds = tmp_path / "eds" / "eds.yaml", tmp_path / "lds" / "lds.yaml"
        eds.parent.mkdir()
        lds.parent.mkdir()
        envoy_configs.write_eds(eds, {a: 1 for a in backends.addresses})
        bootstrap = yaml.safe_load(envoy_configs.render_client_envoy(
            backends.addresses, policy, wasm_path=paths.WASM, native_path=paths.NATIVE,
            aggregator_port=reports.server.port,
            plugin_config=plugin_config(0, reports.server.port), eds_path=eds))
        listener = bootstrap["static_resources"].pop("listeners")[0]
        bootstrap["dynamic_resources"] = {"lds_config": {"resource_api_version": "V3", "path_config_source": {
            "path": str(lds), "watched_directory": {"path": str(lds.parent)}}}}

        def write_listener(k: int) -> None:
            set_plugin_config(listener, plugin_config(k, reports.server.port))
            resource = {"@type": "type.googleapis.com/envoy.config.listener.v3.Listener", **listener}
            write_atomically(lds, yaml.safe_dump({"resources": [resource]}, sort_keys=False))

        write_listener(0)
        proxy = envoy.start(group, "envoy-client", yaml.safe_dump(bootstrap, sort_keys=False), concurrency=2,
                            extra_args=["--drain-time-s", "1"])
        load = group.start("load", fortio.load_argv(proxy.url(), 100, 4, 45, tmp_path / "load.json"))
        wait_for(lambda: any(len(e) == 3 for e in reports.since(0)), 20, "a report with all three backends",
                 proxy.proc)

        gone = backends.addresses[2]
        envoy_configs.write_eds(eds, {a: 1 for a in backends.addresses[:2]}, version="2")

        def reconfigure(ks: range) -> float:
            for k in ks:
                before = proxy.stat("listener_manager.lds.update_success")
                write_listener(k)
                wait_for(lambda before=before: proxy.stat("listener_manager.lds.update_success") > before, 10,
                         f"listener update {k}", proxy.proc)
            return time.monotonic()

        done = reconfigure(range(1, RECONFIGURATIONS + 1))
        assert proxy.stat("listener_manager.listener_modified") >= RECONFIGURATIONS

        # After the ttl (and the drain, a report period and a few ticks), no report lists the
        # backend that left, and reports still come (the new workers report).
        settled = done + TTL_MS / 1000 + 3.0
        wait_for(lambda: time.monotonic() > settled and len(reports.since(settled)) >= 3, 30,
                 "reports after the ttl", proxy.proc)
        late = reports.since(settled)
        assert all(gone not in e for e in late), (gone, late)
        assert all(e == set(backends.addresses[:2]) for e in late if e), late

        # Every worker of the first round is gone now (silent for longer than the ttl): the next
        # round's workers take their slots over instead of claiming new ones.
        slots_gauge = "wasmcustom.tailweight.vm_slots"
        slots = proxy.stat(slots_gauge)
        assert slots >= 3, slots
        again = reconfigure(range(RECONFIGURATIONS + 1, RECONFIGURATIONS + MORE_RECONFIGURATIONS + 1))
        wait_for(lambda: time.monotonic() > again + TTL_MS / 1000 + 3.0, 30, "the second round's settling",
                 proxy.proc)
        # One round's VMs (2 workers and the main thread's) of slack: a worker of the first round
        # still draining when the second starts holds its slot live, and a loaded machine stretches
        # that (62 -> 63 once in CI). Without the takeover the count grows by ~3 per round (61 -> 95).
        assert proxy.stat(slots_gauge) <= slots + 3, (proxy.stat(slots_gauge), slots)
        assert all(gone not in e for e in reports.since(again + TTL_MS / 1000 + 3.0)), "a left endpoint again"
        load.popen.wait(75)
        total, _ = fortio.counts(fortio.read(tmp_path / "load.json"))
        assert total > 1000, total
    finally:
        reports.server.close()
