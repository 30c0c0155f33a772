"""The aggregator's container image, built without a Docker engine (`make image-aggregator`:
scripts/pack-aggregator-oci.sh over the static musl binary), and aggregator/Dockerfile's build
context.

The image is packed again here, twice, from the binary `make aggregator-static` built: both packs
have the same digest (reproducible); its config runs the binary as a non-root user with the
Dockerfile's entrypoint and arguments; its one layer holds the binary only, which is static and
runs (`--help`) once extracted. `docker build` cannot run on CI (no engine), so the Dockerfile's
context is checked by loading the Cargo workspace from exactly the files .dockerignore admits.
"""
from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest

from tailweight_e2e import paths

REPO = paths.REPO
ORAS_VERSION = re.search(r"^ORAS_VERSION := (\S+)$", (REPO / "mk" / "oci.mk").read_text(), re.M).group(1)
ORAS = paths.CACHE / "bin" / f"oras-{ORAS_VERSION}"
STATIC = REPO / "target" / "x86_64-unknown-linux-musl" / "release" / "tailweight-aggregator"
BINARY_IN_IMAGE = "usr/local/bin/tailweight-aggregator"
TAG = "0.0.0-test"


def pack(out: Path) -> tuple[Path, str]:
    """scripts/pack-aggregator-oci.sh into out/: (the layout directory, the manifest digest)."""
    layout = out / "layout"
    subprocess.run(["bash", str(REPO / "scripts" / "pack-aggregator-oci.sh"), str(ORAS), str(STATIC), str(layout),
                    TAG, str(out / "image.tar")], check=True, capture_output=True, text=True, timeout=120)
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == TAG
    return layout, entry["digest"]


def blob(layout: Path, digest: str) -> bytes:
    algorithm, hex_digest = digest.split(":")
    return (layout / "blobs" / algorithm / hex_digest).read_bytes()


def dockerfile_final_stage() -> dict[str, str]:
    """USER, ENTRYPOINT and CMD of aggregator/Dockerfile's last stage (the image users run)."""
    text = (REPO / "aggregator" / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM "):]
    return {k: v.strip() for k, v in re.findall(r"^(USER|ENTRYPOINT|CMD) (.+)$", final, re.M)}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """The packed image: its layout, manifest, config and the layer's tar (uncompressed)."""
    if not (ORAS.is_file() and STATIC.is_file()):
        pytest.fail(f"need {ORAS} and {STATIC}: run `make image-aggregator`")
    out = tmp_path_factory.mktemp("image")
    layout, digest = pack(out)
    manifest = json.loads(blob(layout, digest))
    config = json.loads(blob(layout, manifest["config"]["digest"]))
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    layer_tar = gzip.decompress(blob(layout, layer["digest"]))
    return {"out": out, "layout": layout, "digest": digest, "manifest": manifest, "config": config, "layer": layer_tar}


def test_packing_twice_gives_the_same_digest(image, tmp_path):
    assert pack(tmp_path)[1] == image["digest"]


def test_config_runs_the_dockerfiles_entrypoint_as_a_non_root_user(image):
    config, final = image["config"], dockerfile_final_stage()
    assert config["os"] == "linux" and config["architecture"] == "amd64"
    user = config["config"]["User"]
    uid, gid = (int(x) for x in user.split(":"))
    assert uid != 0 and gid != 0, user
    assert user == final["USER"]
    assert config["config"]["Entrypoint"] == json.loads(final["ENTRYPOINT"]) == ["/" + BINARY_IN_IMAGE]
    assert config["config"]["Cmd"] == json.loads(final["CMD"])
    assert "8080/tcp" in config["config"]["ExposedPorts"]
    # The config names the layer by its uncompressed digest, as every OCI image's does.
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(image["layer"]).hexdigest()]


def test_layer_holds_only_the_static_binary_and_it_runs(image):
    with tarfile.open(fileobj=io.BytesIO(image["layer"])) as layer:
        members = {m.name.rstrip("/"): m for m in layer.getmembers()}
        assert set(members) == {"usr", "usr/local", "usr/local/bin", BINARY_IN_IMAGE}, sorted(members)
        binary = members[BINARY_IN_IMAGE]
        assert binary.isfile() and binary.mode == 0o755 and binary.uid == 0 and binary.mtime == 0
        layer.extractall(image["out"] / "rootfs", filter="data")
    extracted = image["out"] / "rootfs" / BINARY_IN_IMAGE
    ldd = subprocess.run(["ldd", str(extracted)], capture_output=True, text=True)
    # A static-pie says "statically linked", a plain static executable "not a dynamic executable".
    said = ldd.stdout + ldd.stderr
    assert "=>" not in said and ("statically linked" in said or "not a dynamic executable" in said), said
    run = subprocess.run([str(extracted), "--help"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert "--listen" in run.stdout


def test_image_archive_is_the_layout(image):
    """The tar `docker load` / `ctr images import` read holds the layout's files, nothing else."""
    with tarfile.open(image["out"] / "image.tar") as archive:
        names = {n.removeprefix("./") for n in archive.getnames()} - {"."}
    layout = image["layout"]
    assert names == {str(p.relative_to(layout)) for p in layout.rglob("*")}
    assert "oci-layout" in names and "index.json" in names


# ---------------------------------------------------------------------------------------------------
# aggregator/Dockerfile's build context


def dockerignore_admits(path: str, rules: list[tuple[bool, str]]) -> bool:
    """Docker's reading of .dockerignore: the last rule matching the path or one of its parent
    directories decides; `*` does not cross `/`, `**` matches any number of directories."""
    parts = path.split("/")

    def matches(pattern: list[str], names: list[str]) -> bool:
        if not pattern:
            return not names
        if pattern[0] == "**":
            return any(matches(pattern[1:], names[i:]) for i in range(len(names) + 1))
        return bool(names) and fnmatch.fnmatchcase(names[0], pattern[0]) and matches(pattern[1:], names[1:])

    admitted = True
    for negated, pattern in rules:
        split = pattern.strip("/").split("/")
        if any(matches(split, parts[:n]) for n in range(1, len(parts) + 1)):
            admitted = negated
    return admitted


def test_dockerignore_admits_the_workspace_cargo_loads(tmp_path):
    """Cargo loads every workspace member's manifest and targets even to build one package: the
    context .dockerignore leaves (of the tracked files) loads as a workspace, with the aggregator
    in it, and every member is there."""
    rules = [(line.startswith("!"), line.removeprefix("!")) for line in
             (REPO / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")]
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, check=True, capture_output=True, text=True).stdout
    context = tmp_path / "context"
    for name in tracked.splitlines():
        if dockerignore_admits(name, rules) and (REPO / name).is_file():
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, context / name)
    members = tomllib.loads((REPO / "Cargo.toml").read_text())["workspace"]["members"]
    assert all((context / m / "Cargo.toml").is_file() for m in members), members
    assert not (context / "fuzz" / "corpus").exists() and not (context / "e2e").exists()
    metadata = subprocess.run(["cargo", "metadata", "--locked", "--offline", "--no-deps", "--format-version", "1"],
                              cwd=context, capture_output=True, text=True, timeout=120)
    assert metadata.returncode == 0, metadata.stderr
    assert "tailweight-aggregator" in {p["name"] for p in json.loads(metadata.stdout)["packages"]}
