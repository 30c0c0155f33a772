"""A real node on this machine: e2e/node/probe.sh starts Debian's containerd (runc, CNI bridge), etcd +
kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet built from the pinned
k8s.io/kubernetes module (the controllers make the Deployments' pods, EndpointSlices and
ServiceAccounts, the scheduler binds pods), and a pod bound to that node runs the project's aggregator
image (imported with `ctr`, never pulled) until its /healthz answers on the pod IP. Then the mesh
(e2e/node/mesh.sh): istiod's injection webhook puts istio-init and istio-proxy (the project's proxy
image: pilot-agent + the pip Envoy) into a second aggregator pod, which runs with istio-init's iptables
in its netns and Envoy ready; an injected Fortio pod sends to it through both sidecars. Then the user's
path (e2e/node/backends.sh): two Deployments of injected pods of the project's emulator image (fast,
slow) behind a Service, and a Fortio pod sending to it: every pod serves a share, and no request fails.
Then the chart (e2e/node/chart.sh, lifecycle.sh, leave.sh): `helm install` of the packaged chart, the
module fetched by the in-pod agent from a registry on the bridge, the slow pod's share falling; `helm
upgrade` to a new module digest and `helm rollback` under load without a failed request, the
aggregator's Deployment rolling each time, the client's Envoy running the new digest's module and then
the first one's again; the namespace opted out (no module in old or new sidecars) and in again; `helm
uninstall` under load (the aggregator's pods garbage-collected), after which pods annotated with the
chart's bootstrap override still start. Every piece must PASS, and nothing the probe made may outlive
it.

Between steered and the upgrade, the CLI (e2e/node/cli.sh): `tailweight endpoints --pod` reaches the
client's sidecar through the apiserver's port-forward to the kubelet, names the emulator pods, and
asks both aggregator replicas (the chart's replicas: 2), every invocation answered.

Opt-in (`make test-node`, ~9 min warm on a loaded 2-core machine; not part of `make test`): needs
root, the Debian packages scripts/install-deps.sh installs, `make node-bins mesh-bins` and the image archives, the chart
archive and the module layout `make node-probe` builds. See docs/real-node.md for what each piece
needs and what blocks it elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "e2e" / "node" / "probe.sh"
PAUSE_IMAGE = ROOT / "build" / "node" / "pause-image.tar"
PROXY_IMAGE = ROOT / "build" / "node" / "proxy-image.tar"
FORTIO_IMAGE = ROOT / "build" / "node" / "fortio-image.tar"
EMULATOR_IMAGE = ROOT / "build" / "node" / "emulator-image.tar"
MODULE_LAYOUT = ROOT / "build" / "oci" / "tailweight-filter"
PIECES = ["kernel", "containerd", "image", "ctr-run", "cni", "apiserver", "controllers", "kubelet", "node-ready", "pod",
          "streaming", "proxy-image", "istiod", "inject", "sidecar", "traffic", "backends", "baseline",
          "helm-install", "steered", "cli", "replicas", "upgrade", "rollback", "bootstrap", "dashboard",
          "opt-out", "opt-in", "uninstall"]


def versions_env() -> dict[str, str]:
    text = (ROOT / "e2e" / "istio" / "build" / "versions.env").read_text()
    return dict(re.findall(r"^([A-Z0-9_]+)=(\S+)$", text, re.M))


def version() -> str:
    return re.search(r'^version = "(.*)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)


def aggregator_image() -> Path:
    return ROOT / "build" / "oci" / f"tailweight-aggregator-{version()}.tar"


def chart_archive() -> Path:
    return ROOT / "build" / "charts" / f"tailweight-{version()}.tgz"


def cli() -> Path:
    return ROOT / "target" / "x86_64-unknown-linux-musl" / "release" / "tailweight"


def oras() -> Path:
    oras_version = re.search(r"^ORAS_VERSION := (\S+)", (ROOT / "mk" / "oci.mk").read_text(), re.M).group(1)
    cache = Path(os.environ.get("TW_CACHE", Path.home() / ".cache" / "tailweight"))
    return cache / "bin" / f"oras-{oras_version}"


def missing_prerequisites() -> list[str]:
    """What this machine lacks for the probe, each with how to get it."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (containerd, network namespaces and cgroups)")
    for tool in ("containerd", "runc", "ctr", "iptables", "ip", "nsenter", "kubectl"):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (scripts/install-deps.sh installs the Debian packages)")
    if not Path("/usr/lib/cni/bridge").exists():
        missing.append("/usr/lib/cni/bridge (Debian's containernetworking-plugins)")
    bin_dir = Path(os.environ.get("TW_CACHE", Path.home() / ".cache" / "tailweight")) / "istio" / "bin"
    v = versions_env()
    for name in (f"etcd-{v['ETCD_VERSION']}", f"kube-apiserver-{v['K8S_VERSION']}", f"kubelet-{v['K8S_VERSION']}",
                 f"kube-controller-manager-{v['K8S_VERSION']}", f"kube-scheduler-{v['K8S_VERSION']}"):
        if not (bin_dir / name).exists():
            missing.append(f"{bin_dir / name} (make node-bins)")
    for part in (bin_dir / f"pilot-discovery-{v['ISTIO_VERSION']}", bin_dir / f"helm-{v['HELM_VERSION']}",
                 bin_dir.parent / f"crds-{v['ISTIO_API_VERSION']}.yaml",
                 bin_dir.parent / f"istiod-chart-{v['ISTIO_VERSION']}", bin_dir / f"registry-{v['GGCR_VERSION']}"):
        if not part.exists():
            missing.append(f"{part} (make mesh-bins)")
    for image in (aggregator_image(), PAUSE_IMAGE, PROXY_IMAGE, FORTIO_IMAGE, EMULATOR_IMAGE, chart_archive(),
                  MODULE_LAYOUT / "index.json", oras(), cli()):
        if not image.exists():
            missing.append(f"{image} (make node-probe builds it)")
    return missing


def results(stdout: str) -> dict[str, list[str]]:
    """The probe's closing table: piece -> its result lines (ctr-run has one per snapshotter)."""
    table = stdout.split("== real node on this machine", 1)[1].splitlines()[1:]
    out: dict[str, list[str]] = {}
    for line in table:
        piece, _, rest = line.partition(" ")
        out.setdefault(piece, []).append(rest.strip())
    return out


def test_the_kubelet_runs_pods_that_istiods_webhook_injected_and_they_talk_through_their_sidecars():
    missing = missing_prerequisites()
    if missing:
        pytest.skip("real node prerequisites missing: " + "; ".join(missing))
    rules_before = set(iptables_rules())
    run = subprocess.run(["bash", str(PROBE), str(aggregator_image()), str(PAUSE_IMAGE), str(PROXY_IMAGE),
                          str(FORTIO_IMAGE), str(EMULATOR_IMAGE), str(chart_archive()), str(MODULE_LAYOUT),
                          str(oras()), str(cli())],
                         capture_output=True, text=True, timeout=1200)
    print(run.stdout)  # the figures of each piece (pytest -rP shows them for a passing run)
    table = results(run.stdout)
    assert list(table) == PIECES, run.stdout + run.stderr[-4000:]
    for piece, lines in table.items():
        for line in lines:
            assert line.startswith("PASS"), f"{piece}: {line}\n{run.stderr[-4000:]}"
    assert len(table["ctr-run"]) == 2  # overlayfs and native snapshotters
    # The controller-manager made the default ServiceAccount; the scheduler serves.
    assert "ServiceAccount default/default made by it; kube-scheduler" in table["controllers"][0]
    assert re.match(r"PASS Running, IP 10\.\d+\.\d+\.\d+, /healthz answered", table["pod"][0])
    # The apiserver reaches the kubelet: port-forward, logs and exec stream through it.
    assert "/healthz answered; kubectl logs read; kubectl exec ran" in table["streaming"][0]
    # The webhook added Istio's init container and sidecar to the pod the probe created.
    injected = table["inject"][0].split(": ", 1)[1].split()
    assert {"istio-init", "istio-proxy", "server"} == set(injected)
    # Fortio's requests were counted by the client's outbound and the server's inbound Envoy, over TLS.
    sent, received, handshakes = map(int, re.search(
        r"client Envoy (\d+) x 200, server Envoy inbound (\d+) x 200, (\d+) TLS", table["traffic"][0]).groups())
    assert sent > 0 and received > 0 and handshakes > 0
    # Emulated backends with a slow pod behind a Service: two Deployments' pods (their ReplicaSets
    # made them, the scheduler bound them, the controller wrote the EndpointSlice); Fortio's requests
    # reach every pod through the sidecars, and none fails.
    assert re.match(r"PASS 3 emulator pods Ready \(10\.\S+ 10\.\S+ 10\.\S+\) of Deployments emu-fast \(2\) and "
                    r"emu-slow \(1\), emu-slow-\S+ slow .*, EndpointSlice by the controller$", table["backends"][0])
    slow_pod = re.search(r"(emu-slow-\S+) slow", table["backends"][0]).group(1)
    window = r"slow pod share ([\d.]+)% of (\d+) requests in \d+ s \(each pod: ([\d. ]+) %\), (\d+) failed"
    before, requests, shares, failed = re.search(window, table["baseline"][0]).groups()
    assert int(requests) > 0 and int(failed) == 0
    assert all(float(share) > 0 for share in shares.split())
    # The packaged chart installed; the client's sidecar runs the module the agent fetched from the
    # registry on the bridge, and the slow pod's share falls below half of what it was.
    assert "installed, 2 aggregator pods Ready" in table["helm-install"][0]
    assert "Deployment rolled out, EndpointSlice by the controller" in table["helm-install"][0]
    after, requests, _, failed = re.search(window, table["steered"][0]).groups()
    assert int(requests) > 0 and int(failed) == 0
    assert float(after) < float(before) / 2
    # The CLI, through the apiserver's port-forward to the client pod, names every endpoint by its
    # pod, with the owning replica's weight and the picker's latency; the slow pod has the smallest
    # share.
    shares = {pod: float(share) for pod, share in re.findall(
        r"(emu-(?:fast|slow)-\S+) ([\d.]+)% weight [\d.]+ latency [\d.]+ms", table["cli"][0])}
    assert len(shares) == 3 and slow_pod in shares, table["cli"][0]
    assert min(shares, key=shares.get) == slow_pod, table["cli"][0]
    # Two replicas: one holds the cluster, the other answers 404; the CLI asks both and never fails.
    assert re.search(r"tailweight-aggregator-\S+ 200", table["replicas"][0])
    assert re.search(r"tailweight-aggregator-\S+ 404", table["replicas"][0])
    runs = re.search(r"(\d+) errors in (\d+) invocations, weights in (\d+)", table["replicas"][0]).groups()
    assert runs[0] == "0" and runs[1] == runs[2] and int(runs[1]) >= 20, table["replicas"][0]
    # Upgrade to a new module digest and roll back, both under load: no request fails, and the
    # client's Envoy swaps to the new digest's module and back to the first one's.
    swap = r"client Envoy's module ([0-9a-f]{12}) -> ([0-9a-f]{12})"
    for piece in ("upgrade", "rollback"):
        assert re.search(r" 0 failed of [1-9]\d* requests", table[piece][0]), table[piece][0]
        # The aggregator rolled through its Deployment: every pod after the step is a new one.
        rolled = re.search(r"aggregator rolled through its Deployment: pods (.+) -> (.+)$", table[piece][0])
        pods_before, pods_after = (set(pods.split()) for pods in rolled.groups())
        assert len(pods_after) == 2 and not pods_before & pods_after, table[piece][0]
    first, upgraded = re.search(swap, table["upgrade"][0]).groups()
    assert first != upgraded
    assert re.search(swap, table["rollback"][0]).groups() == (upgraded, first)
    # Prometheus scraping the node's pods as the chart's monitors say answers the dashboard's queries:
    # every panel has series but those a healthy node leaves empty.
    with_data, panels = map(int, re.search(r"(\d+) of (\d+) panels with series", table["dashboard"][0]).groups())
    assert panels == 12 and with_data >= 10, table["dashboard"][0]
    # Opted out under load: no request fails, the running and the new sidecars run no module; opted
    # in again, both run the first module.
    assert re.search(r" 0 failed of [1-9]\d* requests", table["opt-out"][0])
    assert re.search(r"emu-client-3 \(no module, no filter stats, 0 failed of [1-9]\d*\)", table["opt-out"][0])
    assert f"run module {first} again" in table["opt-in"][0]
    # Uninstall under load: no request fails; the aggregator's ReplicaSets and pods go by garbage
    # collection; pods of the namespace start afterwards (a Deployment restarted, new pods), the one
    # annotated with the chart's bootstrap override too (its ConfigMap kept), while a pod naming a
    # missing ConfigMap cannot.
    assert re.search(r" 0 failed of [1-9]\d* requests", table["uninstall"][0]), run.stderr[-3000:]
    assert "the aggregator's ReplicaSets and pods garbage-collected" in table["uninstall"][0]
    assert re.search(r"Deployment emu-fast restarted \(new pods emu-fast-\S+ emu-fast-\S+\), new pods emu-client-2, "
                     r"emu-boot-3 \(annotated\) Ready afterwards", table["uninstall"][0])
    assert "emu-boot-missing (naming no ConfigMap) not Ready, FailedMount" in table["uninstall"][0]
    assert run.returncode == 0

    # Nothing outlives the probe: its work dir, processes, bridge and netns are gone.
    work, bridge, netns = re.search(r"work dir (\S+), bridge (\S+), netns (\S+)", run.stderr).groups()
    assert not Path(work).exists()
    leftover = [p for p in Path("/proc").iterdir() if p.name.isdigit() and work.encode() in _cmdline(p)]
    assert leftover == []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert bridge not in links
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert netns not in spaces
    # The kubelet's KUBE-* chains (it makes them in the host's tables) are removed again.
    assert [rule for rule in iptables_rules() if rule not in rules_before] == []


def iptables_rules() -> list[str]:
    """The host's IPv4 and IPv6 rules and chains (no counters), one a line."""
    out = []
    for save in ("iptables-save", "ip6tables-save"):
        text = subprocess.run([save], capture_output=True, text=True, check=True).stdout
        table = ""
        for line in text.splitlines():
            if line.startswith("*"):
                table = line
            elif line.startswith(":"):  # a chain: its name (the policy's packet counters change)
                out.append(f"{save} {table} {line.split()[0]}")
            elif line.startswith("-A"):
                out.append(f"{save} {table} {line}")
    return out


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:  # the process ended while we looked
        return b""
