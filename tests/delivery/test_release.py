"""`make release` without the image (test_dockerfile checks the image's version label): one
version on every artifact, checksums that hold, and a Spark package that brings the data source
and what it imports, never the operator's dependencies."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import urllib.request
import uuid
import venv
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from packaging.requirements import Requirement

from jetstream_devtools.gobuild import ensure_tools
from jetstream_devtools.natsserver import NatsServer
from jetstream_devtools.paths import project_version
from jetstream_devtools.registry import Registry
from jetstream_devtools.release import (
    SPARK_REQUIRES,
    oci_archive,
    push_chart,
    push_oci_archive,
    release,
)
from tests.support.spark_jobs import LOCAL_SESSION

from .helpers import ROOT

pytestmark = pytest.mark.go_tools("registry")

OPERATOR_ONLY = {"kopf", "kubernetes", "pydantic", "cryptography", "jetstream-operator", "nkeys"}


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release") / "dist"
    release(out, image=False)
    return out


def _metadata(wheel: Path) -> list[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(name).decode())
    return [(key, str(value)) for key, value in message.items()]


def test_every_artifact_carries_the_one_version_and_its_checksum(released: Path) -> None:
    version = project_version(ROOT)
    assert version is not None
    names = sorted(path.name for path in released.iterdir())
    assert names == sorted(
        [
            "SHA256SUMS",
            f"jetstream-operator-{version}.tgz",
            f"jetstream_operator-{version}-py3-none-any.whl",
            f"jetstream_operator-{version}.tar.gz",
            f"jetstream_spark-{version}-py3-none-any.whl",
            f"jetstream_spark-{version}.tar.gz",
        ]
    )
    for line in (released / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((released / name).read_bytes()).hexdigest() == digest
    with tarfile.open(released / f"jetstream-operator-{version}.tgz") as chart:
        member = chart.extractfile("jetstream-operator/Chart.yaml")
        assert member is not None
        meta = yaml.safe_load(member.read())
    assert (meta["version"], str(meta["appVersion"])) == (version, version)
    printed = subprocess.run(
        [sys.executable, "-m", "jetstream_operator.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed.split()[:2] == ["jetstream-operator", version]


SPARK_JOB = (
    LOCAL_SESSION
    + """
rows = (
    spark.read.format("jetstream").option("servers", sys.argv[1]).option("stream", sys.argv[2])
    .load().select("subject", "data").collect()
)
print("ROWS", sorted((row.subject, bytes(row.data).decode()) for row in rows))
spark.stop()
"""
)


async def _publish(url: str, stream: str, count: int) -> None:
    connection = await nats.connect(url)
    try:
        js = connection.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
        for index in range(count):
            await js.publish(f"{stream.lower()}.{index}", f"order-{index}".encode())
    finally:
        await connection.close()


def _run(python: Path, *args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(python), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout


def test_the_spark_package_brings_only_what_the_data_source_needs_and_reads_a_stream(
    released: Path, tmp_path: Path, nats_server: NatsServer
) -> None:
    """Installed into an empty environment (with the `pyspark` extra, as a local run would
    want), nothing of the operator comes along, and a Spark job reads a stream with it."""
    version = project_version(ROOT)
    wheel = released / f"jetstream_spark-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        packages = {name.split("/")[0] for name in archive.namelist()}
    assert packages == {"jetstream_spark", f"jetstream_spark-{version}.dist-info"}
    required = [value for key, value in _metadata(wheel) if key == "Requires-Dist"]
    assert {r for r in required if "extra ==" not in r} == {
        str(Requirement(r)) for r in SPARK_REQUIRES
    }
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", str(wheel))
    listed = _run(python, "-m", "pip", "list", "--format=freeze")
    names = {line.split("==")[0].lower().replace("_", "-") for line in listed.split()}
    assert {"jetstream-spark", "nats-py", "pyarrow"} <= names and "pyspark" not in names
    assert not names & OPERATOR_ONLY, names
    _run(python, "-m", "pip", "install", "--quiet", f"{wheel}[pyspark]")
    listed = _run(python, "-m", "pip", "list", "--format=freeze")
    names = {line.split("==")[0].lower().replace("_", "-") for line in listed.split()}
    assert not names & OPERATOR_ONLY, names

    stream = f"SLIM_{uuid.uuid4().hex[:6].upper()}"
    asyncio.run(_publish(nats_server.url, stream, 3))
    job = tmp_path / "job.py"
    job.write_text(SPARK_JOB)
    out = _run(python, str(job), nats_server.url, stream)
    expected = [(f"{stream.lower()}.{index}", f"order-{index}") for index in range(3)]
    assert f"ROWS {expected!r}" in out, out[-2000:]


def _tar_with(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def read_layout(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, bytes]]:
    """(index, manifest, blobs by digest) of an OCI layout tarball, every digest checked."""
    with tarfile.open(path) as layout:
        files = {
            m.name: member.read()
            for m in layout.getmembers()
            if (member := layout.extractfile(m)) is not None
        }
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    blobs = {}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            digest = name.rsplit("/", 1)[1]
            assert hashlib.sha256(data).hexdigest() == digest
            blobs[f"sha256:{digest}"] = data
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    manifest = json.loads(blobs[entry["digest"]])
    assert entry["size"] == len(blobs[entry["digest"]])
    return index, manifest, blobs


def test_a_docker_archive_becomes_an_oci_layout_of_the_same_image(tmp_path: Path) -> None:
    config = json.dumps({"architecture": "amd64", "os": "linux"}).encode()
    layers = [b"first layer tar", b"second layer tar"]
    saved = _tar_with(
        tmp_path / "saved.tar",
        {
            "manifest.json": json.dumps(
                [{"Config": "c.json", "Layers": ["l1/layer.tar", "l2/layer.tar"]}]
            ).encode(),
            "c.json": config,
            "l1/layer.tar": layers[0],
            "l2/layer.tar": layers[1],
        },
    )
    index, manifest, blobs = read_layout(oci_archive(saved, "1.2.3", tmp_path / "oci.tar"))
    assert index["manifests"][0]["annotations"] == {"org.opencontainers.image.ref.name": "1.2.3"}
    assert blobs[manifest["config"]["digest"]] == config
    assert [blobs[layer["digest"]] for layer in manifest["layers"]] == layers


def test_the_image_and_chart_are_pushed_to_a_real_registry_and_read_back(
    released: Path, tmp_path: Path
) -> None:
    """The CNCF Distribution registry, built from its Go module, on loopback: the OCI layout
    pushed through the distribution API comes back with the same manifest and blobs, and helm
    reads the chart's version from oci://."""
    registry = Registry(tmp_path / "registry")
    registry.start()
    try:
        config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {}}).encode()
        saved = _tar_with(
            tmp_path / "saved.tar",
            {
                "manifest.json": json.dumps([{"Config": "c.json", "Layers": ["l/t.tar"]}]).encode(),
                "c.json": config,
                "l/t.tar": b"a layer",
            },
        )
        archive = oci_archive(saved, "9.9.9", tmp_path / "oci.tar")
        digest = push_oci_archive(archive, registry.host, "jetstream-operator", "9.9.9")
        assert registry.tags("jetstream-operator") == ["9.9.9"]
        request = urllib.request.Request(
            f"http://{registry.host}/v2/jetstream-operator/manifests/9.9.9",
            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            served = response.read()
            assert response.headers["Docker-Content-Digest"] == digest
        _, manifest, _ = read_layout(archive)
        assert json.loads(served) == manifest
        with urllib.request.urlopen(
            f"http://{registry.host}/v2/jetstream-operator/blobs/{manifest['config']['digest']}",
            timeout=10,
        ) as response:
            assert response.read() == config

        version = project_version(ROOT)
        reference = push_chart(released / f"jetstream-operator-{version}.tgz", registry.host)
        helm = ensure_tools(["helm"])["helm"]
        shown = subprocess.run(
            [str(helm), "show", "chart", reference, "--version", str(version), "--plain-http"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        assert yaml.safe_load(shown.stdout)["appVersion"] == version
    finally:
        registry.stop()
