"""Fixtures for the Istio e2e tests: one real control plane per test module."""

import pytest

from cluster import ControlPlane, missing_parts


@pytest.fixture(scope="module")
def control_plane():
    """etcd + kube-apiserver + istiod on 127.0.0.1; skips (with the reason) when not built."""
    missing = missing_parts()
    if missing:
        pytest.skip(f"Istio control plane not built ({', '.join(missing)}): run `make istio-bins`")
    with ControlPlane() as cp:
        yield cp
