"""Fixtures for the Istio e2e tests: one real control plane for the whole session.

Test modules keep to their own namespaces and host numbers in the control plane's 127.X.Y.0/24
(test_istio_smoke: .10-.22; test_istio_tailweight: .110-.132; test_istio_wasm_vms: .150-.153;
test_istio_sidecar_bootstrap: .160-.161; test_istio_check: .170-.175), so they share it safely.
"""

import pytest

from cluster import ControlPlane
from versions import ISTIO_API_UNDER_TEST, ISTIO_LINE, ISTIO_UNDER_TEST, missing_parts


def pytest_report_header(config):
    return f"Istio under test: {ISTIO_LINE} line, istio.io/istio {ISTIO_UNDER_TEST}, api {ISTIO_API_UNDER_TEST}"


@pytest.fixture(scope="session")
def control_plane(request):
    """etcd + kube-apiserver + istiod on 127.0.0.1; skips (with the reason) when not built, fails
    instead when a line other than the pinned one was asked for (make asked for it: it must run).

    At teardown, prints the startup time per step and the RSS per process (for the CI log).
    """
    missing = missing_parts()
    if missing and ISTIO_LINE != "pinned":
        pytest.fail(f"the {ISTIO_LINE} Istio line is not built ({', '.join(missing)}): run `make istio-bins`")
    if missing:
        pytest.skip(f"Istio control plane not built ({', '.join(missing)}): run `make istio-bins`")
    with ControlPlane() as cp:
        yield cp
        rss = cp.rss_mb()
        plugins = request.config.pluginmanager
        report, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
        if report is not None and capture is not None:
            with capture.global_and_fixture_disabled():  # else pytest swallows it
                report.write_line(
                    f"\n[istio] {ISTIO_LINE} line (istio.io/istio {ISTIO_UNDER_TEST}, api {ISTIO_API_UNDER_TEST}): "
                    f"startup {sum(cp.timings.values()):.1f} s {cp.timings}; "
                    f"RSS at the end {sum(rss.values()):.0f} MB {_rounded(rss)}")


def _rounded(d: dict) -> dict:
    return {k: round(v) for k, v in d.items()}
