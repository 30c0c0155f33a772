"""Every outbound listener of a sidecar shares the tailweight filter's Wasm VMs and root contexts:
one per thread (Envoy's workers and its main thread) plus Envoy's base VM, whether the client calls
1 service or 50 (one listener and cluster each, see many_services.py). Per-listener VMs would cost
~10 MB and a V8 compile each, and per-listener root contexts would split what a worker learns.

Namespaces `vms-1` and `vms-50` (host numbers .150-.153 of the run's /24), opted in as
the chart does it (module from file://, no aggregator: these sidecars carry no traffic).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml

import many_services as ms
import tailweight_mesh as tm
from sidecars import Sidecar
from tailweight_e2e.procs import wait_for

CONCURRENCY = 2  # Istio's default for sidecars
SIZES = {1: 150, 50: 152}  # services -> the client's host number (the WorkloadEntry gets the next)


@pytest.fixture(scope="module")
def sidecars(control_plane) -> Iterator[dict[int, tuple[ms.ManyServices, Sidecar]]]:
    if not tm.WASM.is_file():
        pytest.skip(f"not built: {tm.WASM} (make wasm)")
    cp = control_plane
    out = {}
    for count, host in SIZES.items():
        many = ms.apply(cp, f"vms-{count}", count, cp.ip(host), cp.ip(host + 1), tailweight=True)
        out[count] = (many, None)
    for count, (many, _) in out.items():
        # istiod applies the namespace's WasmPlugin to proxies that connect after it processed it:
        # wait until the client starts with the filter in every listener.
        def started(many=many):
            sidecar = many.start_client(cp, CONCURRENCY)
            if len(many.listeners(sidecar)) == many.count and ms.v8_vms(sidecar).get("active"):
                return sidecar
            cp.stop_sidecar(sidecar)
            return None
        out[count] = (many, wait_for(started, 60, f"{many.namespace} client with the filter", interval_s=1))
    yield out
    for _, sidecar in out.values():
        cp.stop_sidecar(sidecar)


def test_listeners_share_one_vm_per_thread(sidecars):
    vms = {}
    for count, (many, sidecar) in sidecars.items():
        listeners = many.listeners(sidecar)
        assert len(listeners) == count, listeners
        # Every listener's chain has the one ECDS filter of the namespace's WasmPlugin.
        chains = [yaml.safe_dump(sidecar.listeners()[name]) for name in listeners]
        assert all(f"/{many.namespace}.tailweight~" in chain for chain in chains)
        vms[count] = ms.v8_vms(sidecar)
    print(f"\n[istio] V8 VMs at concurrency {CONCURRENCY}: {vms} (services: VMs)")
    # The same VMs for 50 listeners as for 1: one per worker and one for the main thread, plus the
    # base VM Envoy keeps to clone them from.
    assert vms[50]["active"] == vms[1]["active"] == CONCURRENCY + 2, vms


def test_listeners_share_one_root_context_per_vm(sidecars, control_plane):
    """An invalid pluginConfig makes each root context count one config error when configured (the
    filter's on_configure): as many for 50 listeners as for 1."""
    cp = control_plane
    for many, _ in sidecars.values():
        ms.opt_in(cp, many, filter_settings={"exploreRatio": 2})
    errors = {count: wait_for(lambda sidecar=sidecar: settled_config_errors(sidecar), 30,
                              f"{sidecar.proxy_id} configured again")
              for count, (_, sidecar) in sidecars.items()}
    print(f"[istio] root contexts configured (config_errors) at concurrency {CONCURRENCY}: {errors}")
    assert errors[50] == errors[1] <= CONCURRENCY + 2, errors


def settled_config_errors(sidecar: Sidecar) -> int | None:
    """The filter's config_errors once non-zero and the same twice 0.5 s apart (each thread's root
    context is configured in turn), else None."""
    def read() -> int:
        stats = sidecar.stats("wasmcustom.tailweight.config_errors")
        return int(stats.get("wasmcustom.tailweight.config_errors", 0))
    first = read()
    time.sleep(0.5)
    return first if first > 0 and read() == first else None
