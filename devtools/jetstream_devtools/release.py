"""`make release`: every artifact of one version, from the version in pyproject.toml.

- the operator's wheel and sdist (`jetstream-operator`);
- `jetstream-spark`, the data source alone: its only dependencies are nats-py and pyarrow,
  which the data source imports; pyspark is left to the Spark cluster (extra `pyspark` for a
  local run). Built from operator/jetstream_spark copied into a project of its own;
- the chart, packaged with that version and appVersion;
- the operator image as a tarball in OCI image layout (from `docker save`), its version label
  set;
- SHA256SUMS over all of them.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from .containers import Docker
from .gobuild import ensure_tools
from .paths import REPO_ROOT, project_version

ROOT = REPO_ROOT
SPARK_DISTRIBUTION = "jetstream-spark"
SPARK_REQUIRES = ["nats-py>=2.9,<2.17", "pyarrow>=15"]
"""nats-py within jetstream_spark._nats_fast.SUPPORTED_NATS_PY; pyarrow for the Arrow batches."""
SPARK_EXTRAS = {"pyspark": ["pyspark>=4.2,<5", "pandas>=2,<3"]}
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


def _build(project: Path, out: Path) -> list[Path]:
    """Sdist and wheel (`python -m build`, in an isolated environment as pip would)."""
    before = set(out.iterdir())
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(project)],
        check=True,
        capture_output=True,
    )
    return sorted(set(out.iterdir()) - before)


def spark_project(version: str, directory: Path) -> Path:
    """A project holding jetstream_spark alone, with the slim dependencies."""
    shutil.copytree(
        ROOT / "operator" / "jetstream_spark",
        directory / "jetstream_spark",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "LICENSE", directory / "LICENSE")
    (directory / "README.md").write_text(
        '# jetstream-spark\n\nThe `jetstream` data source for PySpark (`format("jetstream")`), '
        "reading and writing NATS JetStream streams. See docs/spark.md of jetstream-operator.\n"
    )
    requires = ", ".join(f'"{item}"' for item in SPARK_REQUIRES)
    extras = "\n".join(
        f"{name} = [{', '.join(repr(item) for item in items)}]"
        for name, items in SPARK_EXTRAS.items()
    ).replace("'", '"')
    (directory / "pyproject.toml").write_text(
        f"""[build-system]
requires = ["setuptools>=69", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "{SPARK_DISTRIBUTION}"
version = "{version}"
description = "The jetstream data source for PySpark: NATS JetStream streams as DataFrames."
readme = "README.md"
requires-python = ">=3.11"
license = "Apache-2.0"
dependencies = [{requires}]

[project.optional-dependencies]
{extras}

[tool.setuptools.packages.find]
include = ["jetstream_spark*"]
"""
    )
    return directory


def chart_package(version: str, out: Path) -> Path:
    helm = ensure_tools(["helm"])["helm"]
    subprocess.run(
        [
            str(helm),
            "package",
            str(ROOT / "charts" / "jetstream-operator"),
            "--version",
            version,
            "--app-version",
            version,
            "--destination",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return out / f"jetstream-operator-{version}.tgz"


def image_archive(version: str, out: Path) -> Path:
    docker = Docker()
    docker.start()
    tag = f"jetstream-operator:{version}"
    docker.build(ROOT, tag)
    with tempfile.TemporaryDirectory(prefix="image-") as directory:
        saved = docker.save(tag, Path(directory) / "docker-archive.tar")
        return oci_archive(saved, version, out / f"jetstream-operator-image-{version}.oci.tar")


def _blob(layout: tarfile.TarFile, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    layout.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _file(layout: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    layout.addfile(info, io.BytesIO(data))


def oci_archive(docker_archive: Path, ref_name: str, target: Path) -> Path:
    """`docker save`'s archive (Docker 20.10 writes its own format) rewritten as an OCI image
    layout in a tarball, which `ctr images import`, skopeo (`oci-archive:`) and registries'
    tools read: the same config and uncompressed layers, so the same image ID."""
    with tarfile.open(docker_archive) as saved:

        def read(name: str) -> bytes:
            member = saved.extractfile(name)
            if member is None:
                raise ValueError(f"{docker_archive} has no file {name}")
            return member.read()

        (entry,) = json.loads(read("manifest.json"))
        with tarfile.open(target, "w") as layout:
            config = _blob(layout, read(entry["Config"]), OCI_CONFIG)
            layers = [_blob(layout, read(name), OCI_LAYER) for name in entry["Layers"]]
            manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": OCI_MANIFEST,
                    "config": config,
                    "layers": layers,
                },
                separators=(",", ":"),
            ).encode()
            described = _blob(layout, manifest, OCI_MANIFEST)
            annotations = {"org.opencontainers.image.ref.name": ref_name}
            index = {
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": [{**described, "annotations": annotations}],
            }
            _file(layout, "index.json", json.dumps(index).encode())
            _file(layout, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    return target


def push_oci_archive(archive: Path, host: str, repository: str, tag: str) -> str:
    """Push an OCI layout tarball (`oci_archive`) to a plain-HTTP registry through the
    distribution API: each blob, then the manifest under `tag`. Returns the manifest digest."""
    base = f"http://{host}/v2/{repository}"
    with tarfile.open(archive) as layout:
        files = {
            member.name: extracted.read()
            for member in layout.getmembers()
            if (extracted := layout.extractfile(member)) is not None
        }
    for name, data in files.items():
        if not name.startswith("blobs/sha256/") or name.endswith(_manifest_digest(files)):
            continue
        digest = "sha256:" + name.rsplit("/", 1)[1]
        status, _ = _http("HEAD", f"{base}/blobs/{digest}")
        if status == 200:
            continue
        status, headers = _http("POST", f"{base}/blobs/uploads/")
        if status != 202:
            raise RuntimeError(f"registry {host} refused an upload of {repository}: {status}")
        location = headers["Location"]
        if location.startswith("/"):
            location = f"http://{host}{location}"
        separator = "&" if "?" in location else "?"
        status, _ = _http("PUT", f"{location}{separator}digest={digest}", data)
        if status != 201:
            raise RuntimeError(f"registry {host} refused blob {digest}: {status}")
    manifest_digest = _manifest_digest(files)
    manifest = files[f"blobs/sha256/{manifest_digest}"]
    status, _ = _http("PUT", f"{base}/manifests/{tag}", manifest, OCI_MANIFEST)
    if status != 201:
        raise RuntimeError(f"registry {host} refused the manifest of {repository}:{tag}: {status}")
    return f"sha256:{manifest_digest}"


def _manifest_digest(files: dict[str, bytes]) -> str:
    (entry,) = json.loads(files["index.json"])["manifests"]
    return str(entry["digest"]).removeprefix("sha256:")


def _http(
    method: str, url: str, data: bytes | None = None, content_type: str = "application/octet-stream"
) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


def push_chart(package: Path, host: str) -> str:
    """`helm push` of a packaged chart to oci://host/charts (plain HTTP); its reference."""
    helm = ensure_tools(["helm"])["helm"]
    subprocess.run(
        [str(helm), "push", str(package), f"oci://{host}/charts", "--plain-http"],
        check=True,
        capture_output=True,
    )
    return f"oci://{host}/charts/jetstream-operator"


def checksums(paths: Sequence[Path], out: Path) -> Path:
    lines = [f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}" for path in paths]
    target = out / "SHA256SUMS"
    target.write_text("\n".join(sorted(lines, key=lambda line: line.split()[1])) + "\n")
    return target


def release(out: Path, *, image: bool = True, registry: str | None = None) -> list[Path]:
    """Every artifact into `out` (emptied first), and their checksums; with `registry`
    (host:port of a plain-HTTP one), the image and the chart pushed there too."""
    version = project_version(ROOT)
    if version is None:
        raise RuntimeError(f"no version in {ROOT / 'pyproject.toml'}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    artifacts = _build(ROOT, out)
    with tempfile.TemporaryDirectory(prefix="jetstream-spark-") as directory:
        artifacts += _build(spark_project(version, Path(directory)), out)
    artifacts.append(chart_package(version, out))
    if image:
        artifacts.append(image_archive(version, out))
    if registry is not None:
        if image:
            push_oci_archive(artifacts[-1], registry, "jetstream-operator", version)
        push_chart(out / f"jetstream-operator-{version}.tgz", registry)
    return [*artifacts, checksums(artifacts, out)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jetstream_devtools.release", description=__doc__
    )
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    parser.add_argument("--no-image", action="store_true", help="leave out the image (no engine)")
    parser.add_argument(
        "--registry", help="host:port of a plain-HTTP OCI registry to push the image and chart to"
    )
    args = parser.parse_args(argv)
    for path in release(args.out, image=not args.no_image, registry=args.registry):
        print(path.relative_to(args.out.parent) if path.is_relative_to(args.out.parent) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
