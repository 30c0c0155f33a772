"""The client Envoys' Istio retry policy in a real Envoy: the tailweight override header lists retry
choices after the first, and with previous_hosts a retry after a connect failure goes to the
header's second address (Envoy's override_host LB takes the next address for each retry)."""
import pytest
import requests

from harness import emulator
from tailweight_e2e import envoy, paths
from tailweight_e2e.envoy_configs import CLUSTER, OVERRIDE_HEADER, render_client_envoy, write_eds

pytestmark = pytest.mark.timeout(120)

REQUESTS = 40


def client(group, tmp_path, addresses, retries: bool, name: str) -> envoy.Envoy:
    """The harness's tailweight_local client Envoy (endpoints by EDS), trusting the caller's header
    so that the test writes the first choice and the retry choice itself."""
    if not paths.WASM.exists():
        pytest.fail(f"{paths.WASM} is missing: run `make build`")
    eds = tmp_path / name / "backends.yaml"
    eds.parent.mkdir()
    write_eds(eds, dict.fromkeys(addresses, 1))
    config = render_client_envoy([], "tailweight_local", wasm_path=paths.WASM, eds_path=eds,
                                 plugin_config={"trust_incoming_header": True}, retries=retries)
    return envoy.start(group, name, config, log_level="warn")


def served_by(proxy: envoy.Envoy, header: str) -> list[str]:
    """Who answered each of REQUESTS requests carrying the override header `header` ("-" for an error)."""
    session = requests.Session()
    out = []
    for _ in range(REQUESTS):
        r = session.get(proxy.url(), headers={OVERRIDE_HEADER: header}, timeout=10)
        out.append(r.headers.get("x-served-by", "-") if r.status_code == 200 else f"-{r.status_code}")
    return out


def test_retry_after_a_connect_failure_lands_on_the_headers_second_address(group, tmp_path):
    # Backend 0 is in the endpoint set but refuses connections (a pod that is not listening yet).
    emu = emulator.start(group, [emulator.BackendSettings(workers=2, base_ms=1, absent=True)]
                         + [emulator.BackendSettings(workers=2, base_ms=1) for _ in range(3)])
    dead, second, third, fourth = emu.addresses
    proxy = client(group, tmp_path, emu.addresses, retries=True, name="retrying")

    assert served_by(proxy, f"{dead},{second}") == [second] * REQUESTS
    assert served_by(proxy, f"{dead},{fourth},{third}") == [fourth] * REQUESTS
    stats = proxy.stats(f"cluster.{CLUSTER}.")
    assert stats[f"cluster.{CLUSTER}.upstream_cx_connect_fail"] >= 2 * REQUESTS
    assert stats[f"cluster.{CLUSTER}.upstream_rq_retry"] >= 2 * REQUESTS
    assert stats.get(f"cluster.{CLUSTER}.upstream_rq_retry_overflow", 0) == 0
    # The header's first choice serves when it can: no retry then.
    assert served_by(proxy, f"{third},{second}") == [third] * REQUESTS


def test_without_the_retry_policy_the_connect_failure_is_the_answer(group, tmp_path):
    emu = emulator.start(group, [emulator.BackendSettings(workers=2, base_ms=1, absent=True),
                                 emulator.BackendSettings(workers=2, base_ms=1)])
    dead, alive = emu.addresses
    proxy = client(group, tmp_path, emu.addresses, retries=False, name="plain")
    assert served_by(proxy, f"{dead},{alive}") == ["-503"] * REQUESTS
    assert proxy.stat(f"cluster.{CLUSTER}.upstream_rq_retry") == 0
