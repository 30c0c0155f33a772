"""The native shell (target/release/libtailweight_native.so, an Envoy dynamic module) in the real
Envoy 1.40 with real backends on 127.0.0.1: the behaviours the Wasm filter is tested for
(test_filter.py), with the pick set as each stream's upstream override host and the cluster on
least_request, no override header anywhere.

Shares and counts are asserted with margins that real runs meet; nothing here times anything."""
import subprocess

import requests
import yaml
from test_filter import Recorder, reported_requests, run_fortio, start_backends
from test_filter_grpc import ping_load

from harness import emulator as emu
from tailweight_e2e import envoy, envoy_configs, paths
from tailweight_e2e.backend_shares import assert_slow_backend_gets_a_small_share, shares
from tailweight_e2e.procs import wait_for

STAT = "wasmcustom.tailweight."  # as the Wasm shell's (native/src/config_metrics.rs)
ACCESS_FORMAT = "%REQ(X-GATEWAY-DESTINATION-ENDPOINT)% %UPSTREAM_HOST% %RESPONSE_CODE%\n"


class NativeClient:
    """One client Envoy running the native shell in front of an emulator."""

    def __init__(self, group, backends, plugin_config=None, policy="tailweight_native_local", aggregator_port=None,
                 concurrency=1, access_log=None):
        cfg = yaml.safe_load(envoy_configs.render_client_envoy(
            backends, policy, native_path=paths.NATIVE, plugin_config=plugin_config,
            aggregator_port=aggregator_port))
        if access_log:
            hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
            hcm["access_log"] = [{"name": "envoy.access_loggers.file", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                "path": str(access_log), "log_format": {"text_format_source": {"inline_string": ACCESS_FORMAT}}}}]
        self.envoy = envoy.start(group, f"envoy-native-{len(group.procs)}", yaml.safe_dump(cfg),
                                 concurrency=concurrency)
        self.url = self.envoy.url()

    def stat(self, name):
        return self.envoy.stat(STAT + name)


def slow_backend_load(group, tmp_path, client):
    """The load run of the slow-backend tests: 150 rps over 4 connections for 10 s."""
    return lambda: run_fortio(group, tmp_path, client.url, qps=150, connections=4, seconds=10)


def _symbols(path, *flags):
    out = subprocess.run(["nm", "-D", *flags, str(path)], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_the_module_needs_only_what_this_envoy_exports_and_exports_every_filter_and_lb_hook():
    """Envoy 1.40 resolves every symbol when it loads a module (RTLD_NOW), and every HTTP filter
    (load-balancing policy) hook when it makes a filter (policy) config: a module that needs one
    callback more, or lacks one hook, does not load."""
    needed = {s for s in _symbols(paths.NATIVE, "--undefined-only") if s.startswith("envoy_")}
    exported = _symbols(paths.envoy(), "--defined-only")
    assert needed and needed <= exported, sorted(needed - exported)
    hooks = {s for s in _symbols(paths.NATIVE, "--defined-only") if s.startswith("envoy_dynamic_module_on_")}
    assert "envoy_dynamic_module_on_program_init" in hooks
    assert len([h for h in hooks if h.startswith("envoy_dynamic_module_on_http_filter_")]) == 30, sorted(hooks)
    lb_prefix = "envoy_dynamic_module_on_lb_"
    lb_hooks = {h.removeprefix(lb_prefix) for h in hooks if h.startswith(lb_prefix)}
    assert lb_hooks == {"config_new", "config_destroy", "new", "choose_host", "on_host_membership_update", "destroy"}
    assert {s for s in needed if s.startswith("envoy_dynamic_module_callback_lb_")}, "the policy's callbacks"


def test_the_chosen_endpoint_serves_with_no_header_and_a_slow_backend_gets_a_small_share(group, tmp_path):
    backends = start_backends(group, 4, slow={2}, base_ms=4.0)
    log = tmp_path / "access.log"
    client = NativeClient(group, backends.addresses, access_log=log)
    _, total, served = assert_slow_backend_gets_a_small_share(backends, slow_backend_load(group, tmp_path, client),
                                                              slow=2)
    # Steered through the override host: no header was written, and Envoy honoured every pick.
    wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= served, 30, "access log lines")
    assert {line.split()[0] for line in log.read_text().splitlines()} == {"-"}
    picks = client.stat("picks")
    assert picks > 0.8 * total
    assert client.stat("picks_honoured") == picks and client.stat("picks_not_honoured") == 0
    # Fortio's warm-up request per connection is served and steered too.
    assert picks + client.stat("explorations") + client.stat("fallbacks") == served
    wait_for(lambda: client.stat("endpoints_tracked") == 4, 10, "endpoints_tracked == 4")


def test_a_fast_failing_backend_gets_a_small_share_and_a_killed_one_nothing_more(group, tmp_path):
    backends = start_backends(group, 4)
    backends.event([1], "fail")
    client = NativeClient(group, backends.addresses, concurrency=2)
    before = backends.requests_total()
    total, errors = run_fortio(group, tmp_path, client.url, qps=150, connections=4, seconds=10)
    share, _ = shares(before, backends.requests_total())
    assert share[1] < 0.08, share  # an even split would give it 0.25
    assert errors < 0.08 * total
    assert client.stat("failures") >= errors


def test_malformed_configuration_fails_open_and_names_the_field(group):
    backends = start_backends(group, 2)
    client = NativeClient(group, backends.addresses, plugin_config={"hedaer": "x-a"})
    session = requests.Session()
    codes = [session.get(client.url, timeout=10).status_code for _ in range(50)]
    assert codes == [200] * 50
    assert "invalid plugin configuration: field `hedaer`: unknown field" in client.envoy.log()
    assert client.stat("config_errors") >= 1
    assert client.stat("picks") == 0


def test_two_workers_report_once_per_period_from_the_main_thread(group, tmp_path):
    recorder = Recorder()
    try:
        backends = start_backends(group, 3)
        client = NativeClient(group, backends.addresses, policy="tailweight_native", aggregator_port=recorder.port,
                              concurrency=2,
                              plugin_config={"aggregator": {"cluster": envoy_configs.AGGREGATOR_CLUSTER,
                                                            "report_interval_ms": 500}, "sync_interval_ms": 100,
                                             "reporter_id": "native-client"})
        total, errors = run_fortio(group, tmp_path, client.url, qps=100, connections=16, seconds=6)
        assert errors == 0 and total >= 500
        workers = client.envoy.stats(f"listener.{envoy_configs.LISTENER}.worker_")
        per_worker = [v for k, v in workers.items() if k.endswith("downstream_cx_total")]
        assert len(per_worker) == 2 and all(v > 0 for v in per_worker), workers
        wait_for(lambda: any(reported_requests(r) >= total for _, _, r in recorder.snapshot()), 30,
                 f"a report counting all {total} requests of both workers")
        times = [t for t, _, _ in recorder.snapshot()]
        # One report per period for the proxy, not one per worker: at most one per 0.5 s, with slack.
        span = times[-1] - times[0]
        assert len(times) <= span / 0.5 + 3, (len(times), span)
        assert {r["reporter"] for _, _, r in recorder.snapshot()} == {"native-client"}
        assert client.stat("reports_ok") > 0 and client.stat("reports_failed") == 0
    finally:
        recorder.close()


def test_an_aggregator_that_is_down_never_fails_a_request(group, tmp_path):
    recorder = Recorder()
    port = recorder.port
    recorder.close()
    backends = start_backends(group, 3)
    client = NativeClient(group, backends.addresses, policy="tailweight_native", aggregator_port=port,
                          plugin_config={"aggregator": {"cluster": envoy_configs.AGGREGATOR_CLUSTER,
                                                        "report_interval_ms": 200, "timeout_ms": 100}})
    total, errors = run_fortio(group, tmp_path, client.url, qps=100, connections=4, seconds=4)
    assert total >= 300 and errors == 0
    wait_for(lambda: client.stat("reports_failed") > 0, 10, "a failed report counted")
    assert client.stat("reports_ok") == 0 and client.stat("views_applied") == 0
    assert client.stat("picks") > 0.8 * total, "local-only decisions continue"
    assert "aggregator answered 503" in client.envoy.log()


def test_every_grpc_call_on_one_connection_is_steered_and_a_failing_backend_gets_few(group, tmp_path):
    """HTTP/2 to gRPC backends: each RPC picked on its own; UNAVAILABLE in a trailers-only answer
    (HTTP 200, `grpc-status` in the headers) counts against its endpoint."""
    # The backend that fails is the fastest until then, so the picker surely sends it RPCs after
    # (the worst of four may get none at all from two random choices: nothing to count).
    backends = emu.start(group, [emu.BackendSettings(workers=8, base_ms=1.0 if i == 1 else 2.0, protocol="grpc")
                                 for i in range(4)])
    cfg = yaml.safe_load(envoy_configs.render_client_envoy(
        backends.addresses, "tailweight_native_local", native_path=paths.NATIVE, protocol="grpc"))
    proxy = envoy.start(group, "envoy-native-grpc", yaml.safe_dump(cfg))
    destination = proxy.address()
    ping_load(group, tmp_path, destination, qps=100, connections=1, streams=4, seconds=3, name="warm")
    backends.event([1], "fail")
    before = backends.requests_total()
    result = ping_load(group, tmp_path, destination, qps=200, connections=1, streams=4, seconds=6, name="load")
    served = [a - b for a, b in zip(backends.requests_total(), before, strict=True)]
    total = sum(served)
    assert result["DurationHistogram"]["Count"] >= 1000
    picks, honoured = proxy.stat(STAT + "picks"), proxy.stat(STAT + "picks_honoured")
    assert picks > 1000 and honoured == picks
    assert served[1] < 0.03 * total, f"the failing backend got {served}"
    failed_rpcs = result["RetCodes"].get("ERROR", 0)
    assert proxy.stat(STAT + "failures") >= failed_rpcs > 0, result["RetCodes"]


def test_a_failing_backend_that_recovers_gets_its_share_back(group, tmp_path):
    """No health checks: the suspended endpoint is probed with users' requests, and readmitted."""
    backends = start_backends(group, 4)
    client = NativeClient(group, backends.addresses)
    backends.event([1], "fail")
    run_fortio(group, tmp_path, client.url, qps=150, connections=4, seconds=4, name="failing")
    assert client.stat("suspensions") >= 1
    backends.event([1], "recover")
    # Requests in flight (eight sessions), as the two-choice pick needs to compare loads.
    run_fortio(group, tmp_path, client.url, qps=300, connections=8, seconds=4, name="recovering")
    before = backends.requests_total()
    total, errors = run_fortio(group, tmp_path, client.url, qps=300, connections=8, seconds=4, name="recovered")
    share, _ = shares(before, backends.requests_total())
    assert errors == 0
    assert share[1] > 0.12, share  # a fair share is 0.25
