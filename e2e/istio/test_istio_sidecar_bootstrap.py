"""The chart's optional sidecar bootstrap override reaches Envoy the way Istio delivers it.

The opt-in (the chart's release in the namespace, as many_services.opt_in installs it) creates the
ConfigMap `tailweight-sidecar-bootstrap` in the namespace. A pod annotated
`sidecar.istio.io/bootstrapOverride: tailweight-sidecar-bootstrap` gets it mounted by the injector
and pilot-agent started with ISTIO_BOOTSTRAP_OVERRIDE naming the mounted custom_bootstrap.json; here
(no injector) the test writes the ConfigMap's data, as the apiserver returns it, to that file and sets
the variable itself. pilot-agent merges the file into the bootstrap it generates (Envoy's
--config-yaml); Envoy then runs with both: Istio's node identity and xDS, and tcmalloc's background
release (bench/results/overhead.md, section 2, measures what that release saves).

Namespace `bootstrap` (host numbers .160-.161 of the run's /24).
"""

from __future__ import annotations

import json

import many_services as ms
from tailweight_e2e.procs import wait_for

NS = "bootstrap"
CONFIG_MAP = "tailweight-sidecar-bootstrap"
MOUNTED = "etc/istio/custom-bootstrap/custom_bootstrap.json"  # the injector's mount, under the pod's root


def bootstrap_of(config_dump: dict) -> dict:
    return next(c["bootstrap"] for c in config_dump["configs"] if c["@type"].endswith(".BootstrapConfigDump"))


def test_the_bootstrap_override_is_merged_into_the_sidecars_envoy(control_plane):
    cp = control_plane
    many = ms.apply(cp, NS, 1, cp.ip(160), cp.ip(161), tailweight=True)
    shipped = cp.get_json("configmap", CONFIG_MAP, "-n", NS)["data"]["custom_bootstrap.json"]
    override = json.loads(shipped)
    home = cp.dir / "sidecars" / f"{NS}.client"
    (home / MOUNTED).parent.mkdir(parents=True, exist_ok=True)
    (home / MOUNTED).write_text(shipped)

    sidecar = cp.start_sidecar(NS, "client", ip=many.client_ip, labels={"app": "client"}, concurrency=2,
                               extra_env={"ISTIO_BOOTSTRAP_OVERRIDE": str(home / MOUNTED)})
    try:
        bootstrap = bootstrap_of(sidecar.config_dump())
        assert bootstrap["memory_allocator_manager"] == override["memory_allocator_manager"], bootstrap
        # The per-endpoint pick counters' tag rules join Istio's own (repeated fields are appended).
        tags = [t["tag_name"] for t in bootstrap["stats_config"]["stats_tags"]]
        assert {"upstream_endpoint", "upstream_cluster"} <= set(tags) and len(tags) > 2, tags
        # Merged, not replaced: the identity and xDS pilot-agent generated are all still there.
        assert bootstrap["node"]["id"].startswith(f"sidecar~{many.client_ip}~client.{NS}~"), bootstrap["node"]
        assert bootstrap["dynamic_resources"]["ads_config"], bootstrap["dynamic_resources"]
        # And the sidecar works as without it: the filter is in its one outbound listener.
        wait_for(lambda: len(many.listeners(sidecar)) == 1 and ms.v8_vms(sidecar).get("active"), 60,
                 "the outbound listener with the filter")
    finally:
        cp.stop_sidecar(sidecar)
