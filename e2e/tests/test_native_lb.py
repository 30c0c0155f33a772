"""The native shell as the cluster's load-balancing policy too (policy tailweight_native_lb: the
same libtailweight_native.so as HTTP filter and as `envoy.load_balancing_policies.dynamic_modules`)
in the real Envoy 1.40 with real backends on 127.0.0.1: the filter learns from every request and
steers none, the policy picks from what it learned and Envoy's requests in flight, and counts its
picks in the filter's `picks`.

Shares and counts are asserted with margins that real runs meet; nothing here times anything."""
import yaml
from test_filter import run_fortio, start_backends
from test_native import NativeClient, slow_backend_load

from tailweight_e2e import envoy_configs, paths
from tailweight_e2e.backend_shares import assert_slow_backend_gets_a_small_share, shares

POLICY = "tailweight_native_lb"


def test_the_policy_is_the_module_and_the_filter_beside_it():
    cfg = yaml.safe_load(envoy_configs.render_client_envoy(["127.0.0.1:1"], POLICY, native_path=paths.NATIVE))
    (policy,) = cfg["static_resources"]["clusters"][0]["load_balancing_policy"]["policies"]
    typed = policy["typed_extension_config"]
    assert typed["name"] == "envoy.load_balancing_policies.dynamic_modules"
    filters = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]
    filter_module = filters[0]["typed_config"]["dynamic_module_config"]["module"]
    assert typed["typed_config"]["dynamic_module_config"]["module"] == filter_module, "one file, loaded once"


def test_a_slow_backend_gets_a_small_share_and_the_policy_counts_its_picks(group, tmp_path):
    backends = start_backends(group, 4, slow={2}, base_ms=4.0)
    client = NativeClient(group, backends.addresses, policy=POLICY)
    _, total, _ = assert_slow_backend_gets_a_small_share(backends, slow_backend_load(group, tmp_path, client), slow=2)
    # The filter only learned (no exploration of its own, every endpoint known); the policy counts
    # its choices made with what the filter learned as the filter counts its own picks.
    assert client.stat("explorations") == 0
    assert client.stat("picks") > 0.8 * total
    assert client.stat("endpoints_tracked") == 4
    assert "dynamic module returned invalid" not in client.envoy.log()


def test_a_fast_failing_backend_gets_a_small_share_on_two_workers(group, tmp_path):
    """Least request alone would favour it (it answers fastest); each worker's policy reads its own
    worker's balancer, which suspends it after two failures and probes it now and then."""
    backends = start_backends(group, 4)
    backends.event([1], "fail")
    client = NativeClient(group, backends.addresses, policy=POLICY, concurrency=2)
    before = backends.requests_total()
    total, errors = run_fortio(group, tmp_path, client.url, qps=150, connections=4, seconds=10)
    share, _ = shares(before, backends.requests_total())
    assert share[1] < 0.08, share  # an even split would give it 0.25
    assert errors < 0.08 * total
    assert client.stat("failures") >= errors
    assert client.stat("picks") > 0.5 * total


def test_a_failing_backend_that_recovers_gets_its_share_back(group, tmp_path):
    """Avoided while it fails (its failures weigh on its cost, or suspend it: then the policy probes
    it one request at a time when the probe is due), it is drawn again as its failures fade and
    earns its share back from the good answers the filter learns."""
    backends = start_backends(group, 4)
    client = NativeClient(group, backends.addresses, policy=POLICY)
    backends.event([1], "fail")
    before = backends.requests_total()
    run_fortio(group, tmp_path, client.url, qps=150, connections=4, seconds=4, name="failing")
    share, _ = shares(before, backends.requests_total())
    assert client.stat("failures") > 0 and share[1] < 0.08, share
    backends.event([1], "recover")
    run_fortio(group, tmp_path, client.url, qps=300, connections=8, seconds=4, name="recovering")
    before = backends.requests_total()
    _, errors = run_fortio(group, tmp_path, client.url, qps=300, connections=8, seconds=4, name="recovered")
    share, _ = shares(before, backends.requests_total())
    assert errors == 0
    assert share[1] > 0.12, share  # a fair share is 0.25
