"""NACK (nats-io/nack's jetstream-controller) convergence, side by side with operator_bench.py.

Same servers as our benchmark (kube-apiserver + etcd, one nats-server, all on loopback), a fresh
pair for every size, NACK's own CRDs, and NACK's controller as a process pointed at the
kubeconfig and the NATS URL. N Streams + N Consumers (`jetstream.nats.io/v1beta2`) are created
at once and timed until every one has a `Ready=True` condition; the floor is the same creations
made straight with nats-py plus 2N status patches, as in operator_bench.py (here with NACK
stopped, so its reactions to those patches do not load the servers during the floor).

NACK is not part of this repository; build it once, outside it, from the Go module proxy:

    GOBIN=~/.cache/jetstream-operator/nack/latest \\
        go install github.com/nats-io/nack/cmd/jetstream-controller@latest

`go install` leaves the module (and its deploy/crds.yml) in `go env GOMODCACHE`, where the CRDs
are read from unless --nack-crds says otherwise. Then:

    .venv/bin/python bench/nack_bench.py --sizes 100 1000

Status: not yet run against NACK. On this project's machines the Go module proxy answers 403
("This module version is not available") for every version of github.com/nats-io/nack, so the
controller cannot be built here; the script was exercised only with stand-in controllers.

NACK has two modes: its default informer ("legacy") controller and, behind `--control-loop`,
a controller-runtime one; --modes picks which to run (both by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client, config

from jetstream_operator.devenv.controlplane import ControlPlane
from jetstream_operator.devenv.natsserver import NatsServer
from jetstream_operator.devenv.paths import LOOPBACK, cache_root, free_port
from jetstream_operator.devenv.processes import tail

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
from operator_bench import floor_nats, floor_status_patches  # noqa: E402

RESULTS = BENCH_DIR / "results"
NACK_MODULE = "github.com/nats-io/nack"
NACK_CMD = f"{NACK_MODULE}/cmd/jetstream-controller"
NACK_HOME = cache_root() / "nack"
GROUP = "jetstream.nats.io"
VERSION = "v1beta2"
MODES = ("legacy", "control-loop")


def build_command(version: str = "latest") -> str:
    return f"GOBIN={NACK_HOME / version} go install {NACK_CMD}@{version}"


def default_nack_bin() -> Path:
    """The newest build under ~/.cache/jetstream-operator/nack/<version>/, else `latest`."""
    builds = sorted(NACK_HOME.glob("*/jetstream-controller"), key=lambda path: path.stat().st_mtime)
    return builds[-1] if builds else NACK_HOME / "latest" / "jetstream-controller"


# -- NACK binary: version, flags, CRDs --------------------------------------------------------


@dataclass
class Nack:
    binary: Path
    version: str = "unknown"
    flags: set[str] = field(default_factory=set)

    @classmethod
    def inspect(cls, binary: Path) -> Nack:
        nack = cls(binary)
        if shutil.which("go"):
            info = subprocess.run(
                ["go", "version", "-m", str(binary)], capture_output=True, text=True, check=False
            )
            for line in info.stdout.splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "mod" and parts[1] == NACK_MODULE:
                    nack.version = parts[2]
        # Go's flag package prints its usage (one `  -name` line per flag) to stderr on -h.
        usage = subprocess.run(
            [str(binary), "-h"], capture_output=True, text=True, check=False, timeout=30
        )
        nack.flags = set(re.findall(r"^\s+-([\w.-]+)", usage.stderr + usage.stdout, re.M))
        return nack

    def crds_file(self) -> Path:
        gomodcache = subprocess.run(
            ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
        ).stdout.strip()
        module_dir = Path(gomodcache) / f"{NACK_MODULE}@{self.version}" / "deploy"
        for name in ("crds.yml", "crds.yaml"):
            if (module_dir / name).is_file():
                return module_dir / name
        raise FileNotFoundError(
            f"no NACK CRDs in {module_dir}; run `go mod download {NACK_MODULE}@{self.version}` "
            "or pass --nack-crds"
        )

    def argv(self, kubeconfig: Path, nats_url: str, mode: str, workdir: Path) -> list[str]:
        """Out-of-cluster flags: kubeconfig and NATS URL; all namespaces, like our operator."""
        argv = [str(self.binary), f"--kubeconfig={kubeconfig}", f"-s={nats_url}"]
        if mode == "control-loop":
            argv.append("--control-loop")
            # Newer releases bind probes to :8081 by default: keep them off shared ports.
            if "health-probe-bind-address" in self.flags:
                argv.append(f"--health-probe-bind-address={LOOPBACK}:{free_port()}")
            if "cache-dir" in self.flags:
                argv.append(f"--cache-dir={workdir / 'nack-cache'}")
        return argv


class NackProcess:
    """The controller as a child in its own session, in its own directory, logging to a file.

    Its own working directory because control-loop mode makes a temporary directory in `.`.
    """

    def __init__(self, argv: list[str], workdir: Path, kubeconfig: Path) -> None:
        self.argv = argv
        self.workdir = workdir
        self.log_file = workdir / "nack.log"
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"=== {' '.join(self.argv)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv,
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"NACK exited with {self.process.returncode}:\n{tail(self.log_file, 40)}"
            )

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)

    def memory_mib(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) in MiB: resident now and its peak."""
        values = {"VmRSS": float("nan"), "VmHWM": float("nan")}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key = line.split(":", 1)[0]
            if key in values:
                values[key] = int(line.split()[1]) / 1024
        return values["VmRSS"], values["VmHWM"]

    def log_errors(self) -> tuple[int, str]:
        """klog error lines (`E0102 ...`) and the first of them."""
        errors = [
            line
            for line in self.log_file.read_text(errors="replace").splitlines()
            if re.match(r"E\d{4} ", line)
        ]
        return len(errors), (errors[0][:300] if errors else "")


# -- one size, one mode ---------------------------------------------------------------------------


class Bench:
    def __init__(self, workdir: Path, nack: Nack, crds: Path, mode: str) -> None:
        self.workdir = workdir
        self.nack = nack
        self.crds = crds
        self.mode = mode
        self.plane = ControlPlane(workdir / "cp")
        self.nats = NatsServer(workdir / "nats")
        self.controller: NackProcess | None = None

    def start(self) -> None:
        self.plane.start()
        self.nats.start()
        self.api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            str(self.plane.kubeconfig)
        )
        self.objects = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.apply_crds()
        argv = self.nack.argv(self.plane.kubeconfig, self.nats.url, self.mode, self.workdir)
        self.controller = NackProcess(argv, self.workdir / "nack", self.plane.kubeconfig)
        self.controller.start()
        time.sleep(2)  # no health endpoint in legacy mode: just make sure it did not die at once
        self.controller.check()

    def stop(self) -> None:
        if self.controller:
            self.controller.stop()
        self.nats.stop()
        self.plane.stop()

    def apply_crds(self, timeout: float = 60) -> None:
        extensions = client.ApiextensionsV1Api(self.api)
        names = []
        for document in yaml.safe_load_all(self.crds.read_text()):
            if not document or document.get("kind") != "CustomResourceDefinition":
                continue
            try:
                extensions.create_custom_resource_definition(document)
            except client.ApiException as error:
                if error.status != 409:
                    raise
                current = extensions.read_custom_resource_definition(document["metadata"]["name"])
                assert current.metadata is not None
                document["metadata"]["resourceVersion"] = current.metadata.resource_version
                extensions.replace_custom_resource_definition(
                    document["metadata"]["name"], document
                )
            names.append(document["metadata"]["name"])
        for plural in ("streams", "consumers"):
            if f"{plural}.{GROUP}" not in names:
                raise RuntimeError(f"{self.crds} has no {plural}.{GROUP} CRD")
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                crd = extensions.read_custom_resource_definition(name)
                conditions = (crd.status.conditions or []) if crd.status else []
                if any(c.type == "Established" and c.status == "True" for c in conditions):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {name} not Established within {timeout}s")
                time.sleep(0.2)
            if name in (f"streams.{GROUP}", f"consumers.{GROUP}"):
                served = [v.name for v in crd.spec.versions if v.served]
                if VERSION not in served:
                    raise RuntimeError(f"{name} serves {served}, not {VERSION}")

    def namespace(self, name: str) -> str:
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        return name

    def create_many(self, namespace: str, plural: str, bodies: list[dict[str, Any]]) -> None:
        def create(body: dict[str, Any]) -> None:
            self.objects.create_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, {"apiVersion": f"{GROUP}/{VERSION}", **body}
            )

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(create, bodies))

    def readiness(self, namespace: str, plural: str) -> tuple[int, int, str]:
        """(Ready=True, Ready=False, a sample False message) over one plural."""
        items = cast(
            dict[str, Any],
            self.objects.list_namespaced_custom_object(GROUP, VERSION, namespace, plural),
        )
        ready = failed = 0
        sample = ""
        for item in items["items"]:
            for condition in (item.get("status") or {}).get("conditions") or []:
                if condition.get("type") != "Ready":
                    continue
                if condition.get("status") == "True":
                    ready += 1
                elif condition.get("status") == "False":
                    failed += 1
                    sample = sample or str(condition.get("message", ""))[:200]
        return ready, failed, sample

    def wait_ready(self, namespace: str, wanted: int, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        assert self.controller is not None
        while True:
            self.controller.check()
            streams = self.readiness(namespace, "streams")
            consumers = self.readiness(namespace, "consumers")
            if streams[0] >= wanted and consumers[0] >= wanted:
                return {"converged": True, "streams": streams, "consumers": consumers}
            if time.monotonic() > deadline:
                return {"converged": False, "streams": streams, "consumers": consumers}
            time.sleep(0.5)


def stream_body(index: int, prefix: str) -> dict[str, Any]:
    name = f"{prefix}_{index}"
    return {
        "kind": "Stream",
        "metadata": {"name": f"s{index}"},
        "spec": {"name": name, "subjects": [f"{name.lower()}.>"], "storage": "file", "replicas": 1},
    }


def consumer_body(index: int, prefix: str) -> dict[str, Any]:
    return {
        "kind": "Consumer",
        "metadata": {"name": f"c{index}"},
        "spec": {
            "streamName": f"{prefix}_{index}",
            "durableName": f"C{index}",
            "ackPolicy": "explicit",
            "deliverPolicy": "all",
        },
    }


def convergence(bench: Bench, size: int, timeout: float) -> dict[str, Any]:
    namespace = bench.namespace(f"bench-{size}")
    prefix = f"B{size}"
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    bench.create_many(namespace, "streams", [stream_body(i, prefix) for i in range(size)])
    bench.create_many(namespace, "consumers", [consumer_body(i, prefix) for i in range(size)])
    created = time.perf_counter() - started
    outcome = bench.wait_ready(namespace, size, timeout)
    wall = time.perf_counter() - started
    assert bench.controller is not None
    rss, peak = bench.controller.memory_mib()
    errors, first_error = bench.controller.log_errors()
    row: dict[str, Any] = {
        "mode": bench.mode,
        "size": size,
        "namespace": namespace,
        "wall": wall,
        "created": created,
        "rss": rss,
        "peak": peak,
        "log_errors": errors,
        "first_error": first_error,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        **outcome,
    }
    bench.controller.stop()  # the floor is measured with the servers to itself
    row["nats"] = asyncio.run(floor_nats(bench.nats.url, f"F{size}", size))
    row["patches"] = floor_status_patches(bench.objects, namespace, size, GROUP, VERSION)
    row["floor"] = row["nats"] + row["patches"]
    row["ratio"] = row["wall"] / row["floor"]
    return row


def run_one(nack: Nack, crds: Path, mode: str, size: int, timeout: float) -> dict[str, Any]:
    """A fresh control plane and nats-server for every size, so sizes do not affect each other."""
    with tempfile.TemporaryDirectory(prefix=f"nack-bench-{mode}-{size}-") as directory:
        bench = Bench(Path(directory), nack, crds, mode)
        try:
            bench.start()
            return convergence(bench, size, timeout)
        except Exception as error:
            log = bench.controller.log_file if bench.controller else None
            return {
                "mode": mode,
                "size": size,
                "failed": f"{type(error).__name__}: {error}".splitlines()[0][:300],
                "log_tail": tail(log, 20) if log else "",
            }
        finally:
            bench.stop()


def machine() -> str:
    return (
        f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"kube-apiserver v1.34.4, nats-server 2.12.8, date {datetime.now(UTC):%Y-%m-%d}"
    )


def table(nack: Nack, rows: list[dict[str, Any]], timeout: float) -> str:
    lines = [
        f"Machine: {machine()}",
        f"NACK {nack.version} ({nack.binary}), CRDs {GROUP}/{VERSION}",
        "",
        "| mode | N streams + N consumers | wall (s) | created (s) | "
        "floor (s): nats-py + status patches | ratio | NACK RSS end / peak (MiB) | "
        "klog errors | load 1m before/after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "failed" in row:
            last = (row["log_tail"].strip().splitlines() or [""])[-1][:200]
            lines.append(f"| {row['mode']} | {row['size']} | failed: {row['failed']} {last} |")
            continue
        wall, ratio = f"{row['wall']:.1f}", f"{row['ratio']:.2f}x"
        if not row["converged"]:
            wall = (
                f"did not converge in {timeout:.0f} s: {row['streams'][0]}/{row['size']} "
                f"streams, {row['consumers'][0]}/{row['size']} consumers Ready"
            )
            ratio = "n/a"
        lines.append(
            f"| {row['mode']} | {row['size']} | {wall} | {row['created']:.1f} | "
            f"{row['floor']:.1f} ({row['nats']:.1f} + {row['patches']:.1f}) | "
            f"{ratio} | {row['rss']:.0f} / {row['peak']:.0f} | "
            f"{row['log_errors']} | {row['load_before']:.2f} / {row['load_after']:.2f} |"
        )
    notes = [
        f"- {row['mode']} N={row['size']}: first error: `{row['first_error']}`"
        for row in rows
        if row.get("first_error")
    ]
    notes += [
        f"- {row['mode']} N={row['size']}: {kind} Ready=False: `{row[kind][2]}`"
        for row in rows
        for kind in ("streams", "consumers")
        if kind in row and row[kind][1]
    ]
    return "\n".join(lines + (["", *notes] if notes else []))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per size")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--nack-bin", type=Path, default=default_nack_bin())
    parser.add_argument("--nack-crds", type=Path, help="default: deploy/crds.yml in GOMODCACHE")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the .md goes")
    args = parser.parse_args()

    binary = args.nack_bin.expanduser()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        print(f"NACK's controller is not at {binary}. Build it, outside this repository:")
        print(f"    {build_command()}")
        print("or pass --nack-bin PATH.")
        return 2
    nack = Nack.inspect(binary)
    try:
        crds = args.nack_crds or nack.crds_file()
    except (FileNotFoundError, subprocess.CalledProcessError) as error:
        print(error)
        return 2
    if "control-loop" not in nack.flags and "control-loop" in args.modes:
        print(f"NACK {nack.version} has no --control-loop flag; running legacy mode only")
        args.modes = [mode for mode in args.modes if mode != "control-loop"]
    if "kubeconfig" not in nack.flags:
        print(f"warning: NACK {nack.version} lists no -kubeconfig flag; KUBECONFIG is set too")

    rows = []
    for mode in args.modes:
        for size in args.sizes:
            print(f"{mode} N={size} ...", flush=True)
            row = run_one(nack, crds, mode, size, args.timeout)
            print(json.dumps(row, default=str), flush=True)
            rows.append(row)
    text = table(nack, rows, args.timeout)
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"nack-{datetime.now(UTC):%Y%m%d-%H%M}.md").write_text(text + "\n")
    ok = all(row.get("converged") for row in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
