"""`make release` (scripts/release.sh): every artifact a user installs, each carrying the
workspace version, with checksums that verify.

Reads $(BUILD)/release/<version>/ as `make release` left it (`make test-istio` runs it first): the
filter's Wasm OCI image and the aggregator's container image as OCI layout tars tagged with the
version, the Helm chart archive of that version, the static CLI printing it, and SHA256SUMS over
exactly those four files.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "Cargo.toml").read_text())["workspace"]["package"]["version"]
RELEASE = REPO / "build" / "release" / VERSION
TARGET = "x86_64-unknown-linux-musl"
ARTIFACTS = {f"tailweight-filter-{VERSION}.oci.tar", f"tailweight-aggregator-{VERSION}.oci.tar",
             f"tailweight-{VERSION}.tgz", f"tailweight-{VERSION}-{TARGET}"}

pytestmark = pytest.mark.skipif(not (RELEASE / "SHA256SUMS").is_file(), reason=f"{RELEASE}: run `make release`")


def test_release_holds_every_artifact_and_checksums_that_verify():
    assert {p.name for p in RELEASE.iterdir()} == ARTIFACTS | {"SHA256SUMS"}
    listed = {line.split()[1] for line in (RELEASE / "SHA256SUMS").read_text().splitlines()}
    assert listed == ARTIFACTS
    checked = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=RELEASE,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def image(archive: Path) -> tuple[dict, dict]:
    """An OCI layout tar's only image: its index entry and its config."""
    with tarfile.open(archive) as tar:
        def read(name: str) -> bytes:
            return tar.extractfile(f"./{name}").read()
        (entry,) = json.loads(read("index.json"))["manifests"]
        manifest = json.loads(read("blobs/" + entry["digest"].replace(":", "/")))
        config = json.loads(read("blobs/" + manifest["config"]["digest"].replace(":", "/")))
    return entry, config


@pytest.mark.parametrize("name", ["filter", "aggregator"])
def test_images_are_tagged_with_the_version(name):
    entry, config = image(RELEASE / f"tailweight-{name}-{VERSION}.oci.tar")
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == VERSION
    if name == "filter":
        assert (config["architecture"], config["os"]) == ("wasm", "wasip1")
    else:
        assert config["config"]["Labels"]["org.opencontainers.image.version"] == VERSION
        assert config["config"]["User"] == "65532:65532"


def test_chart_archive_is_the_version():
    with tarfile.open(RELEASE / f"tailweight-{VERSION}.tgz") as tar:
        chart = yaml.safe_load(io.BytesIO(tar.extractfile("tailweight/Chart.yaml").read()))
    assert chart["version"] == chart["appVersion"] == VERSION


def test_cli_is_static_and_prints_the_version():
    cli = RELEASE / f"tailweight-{VERSION}-{TARGET}"
    run = subprocess.run([str(cli), "--version"], capture_output=True, text=True, timeout=30)
    assert run.stdout.strip() == f"tailweight {VERSION}"
    ldd = subprocess.run(["ldd", str(cli)], capture_output=True, text=True)
    assert "=>" not in ldd.stdout, ldd.stdout
