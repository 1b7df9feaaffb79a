"""NACK (nats-io/nack's jetstream-controller) side by side with operator_bench.py: convergence
against the same floor, idle cost, drift repair.

Same servers as our benchmark (kube-apiserver + etcd, one nats-server, all on loopback), fresh for
every size and mode, NACK's own CRDs, and NACK's controller as a process pointed at the
kubeconfig and the NATS URL. N Streams + N Consumers (`jetstream.nats.io/v1beta2`) are created
at once and timed until every one has a `Ready=True` condition (counted from watches); the floor
is the same creations made straight with nats-py plus 2N status patches, with NACK stopped.

NACK is not part of this repository. Build its controller from its source, outside this
repository (docs/benchmarks.md says how), and give the binary and its CRDs (deploy/crds.yml in
its source tree) by path:

    .venv/bin/python bench/nack_bench.py --nack-bin /tmp/nack-build/bin/jetstream-controller \\
        --nack-crds /tmp/nack-build/deploy/crds.yml --sizes 100 1000

(or NACK_BIN and NACK_CRDS in the environment). `operator_bench.py --nack-bin ... --nack-crds
...` runs the same after its own sizes, so both are measured in one run.

NACK has two modes: its default informer ("legacy") controller and, behind `--control-loop`,
a controller-runtime one; --modes picks which to run (both by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import identities
import yaml
from deletion import delete_alone, deletion, deletion_lines
from drift import drift_latency
from floor import floor_nats, floor_status_patches
from harness import (
    APPLY_ORDERS,
    RESULTS,
    RESYNC_INTERVAL,
    ApiAudit,
    Servers,
    applied,
    breakdown,
    cpu_line,
    deadline_guard,
    flow_control_delta,
    foreground,
    jetstream_line,
    machine,
    rss_mib,
    save_result,
    servers_cpu_seconds,
)
from kubernetes import client
from watches import ObjectWatch, wait_ready, watching

from jetstream_devtools.paths import LOOPBACK, free_port
from jetstream_devtools.processes import tail

NACK_MODULE = "github.com/nats-io/nack"
GROUP = "jetstream.nats.io"
VERSION = "v1beta2"
MODES = ("legacy", "control-loop")


# -- NACK binary: version, flags -------------------------------------------------------------------


@dataclass
class Nack:
    binary: Path
    crds: Path
    version: str = "unknown"
    flags: set[str] = field(default_factory=set)

    @classmethod
    def inspect(cls, binary: Path, crds: Path, version: str | None = None) -> Nack:
        """Version from the binary's build info unless given (a build from a source archive
        says `(devel)`)."""
        nack = cls(binary, crds)
        if shutil.which("go"):
            info = subprocess.run(
                ["go", "version", "-m", str(binary)],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
            for line in info.stdout.splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[0] in ("mod", "path") and NACK_MODULE in parts[1]:
                    nack.version = parts[2] if parts[0] == "mod" else nack.version
        # Go's flag package prints its usage (one `  -name` line per flag) to stderr on -h.
        usage = subprocess.run(
            [str(binary), "-h"], capture_output=True, text=True, check=False, timeout=30
        )
        nack.flags = set(re.findall(r"^\s+-([\w.-]+)", usage.stderr + usage.stdout, re.M))
        nack.version = version or nack.version
        return nack

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
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

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

    def peak_mib(self) -> float:
        """VmHWM: the peak resident size."""
        if self.pid is None:
            return float("nan")
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def log_errors(self) -> tuple[int, str]:
        """klog error lines (`E0102 ...`) and the first of them."""
        errors = [
            line
            for line in self.log_file.read_text(errors="replace").splitlines()
            if re.match(r"E\d{4} ", line)
        ]
        return len(errors), (errors[0][:300] if errors else "")


# -- one size, one mode ---------------------------------------------------------------------------


class Bench(Servers):
    group = GROUP
    version = VERSION

    def __init__(
        self,
        workdir: Path,
        nack: Nack,
        mode: str,
        identity_mode: str = "admin",
        apply_order: str = "kinds",
    ) -> None:
        super().__init__(workdir, identity_mode)
        self.nack = nack
        self.mode = mode
        self.identity_mode = identity_mode
        self.apply_order = apply_order
        """APPLY_ORDERS: the run's (--apply-order), so NACK is applied as ours is."""
        self.controller: NackProcess | None = None

    def start(self) -> None:
        self.plane.start()
        self.nats.start()
        self.connect()
        self.apply_crds()
        self.connect_identities(self.identity_mode)
        kubeconfig = self.identities.controller
        argv = self.nack.argv(kubeconfig, self.nats.url, self.mode, self.workdir)
        self.controller = NackProcess(argv, self.workdir / "nack", kubeconfig)
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
        for document in yaml.safe_load_all(self.nack.crds.read_text()):
            if not document or document.get("kind") != "CustomResourceDefinition":
                continue
            try:
                extensions.create_custom_resource_definition(document)
            except client.ApiException as error:
                if error.status != 409:
                    raise
            names.append(document["metadata"]["name"])
        for plural in ("streams", "consumers"):
            if f"{plural}.{GROUP}" not in names:
                raise RuntimeError(f"{self.nack.crds} has no {plural}.{GROUP} CRD")
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

    def apply_all(self, namespace: str, size: int, prefix: str) -> float:
        """In the order ours are applied (`--apply-order`)."""
        started = time.perf_counter()
        phases = applied(
            [stream_body(i, prefix) for i in range(size)],
            [consumer_body(i, prefix) for i in range(size)],
            self.apply_order,
        )
        self.create_in_order(namespace, phases)
        return time.perf_counter() - started

    def watch(self, namespace: str, plural: str) -> ObjectWatch:
        return ObjectWatch(self.objects, namespace, plural, GROUP, VERSION)

    def cpu_seconds(self) -> Counter[str]:
        pid = self.controller.pid if self.controller else None
        return servers_cpu_seconds(self.plane, self.nats, {"nack": pid})


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


def measure(bench: Bench, size: int, args: argparse.Namespace, idle: bool) -> dict[str, Any]:
    """Convergence (with the writes that follow it); at the idle size idle cost and drift
    repair; then the floor and applying alone with NACK stopped."""
    namespace = bench.namespace(f"bench-{size}")
    prefix = f"B{size}"
    assert bench.controller is not None
    watches = [bench.watch(namespace, plural) for plural in ("streams", "consumers")]
    row: dict[str, Any] = {"mode": bench.mode, "size": size}
    with watching(watches):
        writes_before = bench.writes()
        # Counted as for ours, so that the advisories cost both runs the same.
        audit = ApiAudit([bench.nats.url])
        cpu_before, waits_before = bench.cpu_seconds(), bench.flow_control()
        started = time.monotonic()
        row["created"] = bench.apply_all(namespace, size, prefix)
        row["cpu_applying"] = dict(bench.cpu_seconds() - cpu_before)
        try:
            row["wall"] = wait_ready(watches, size, args.timeout) - started
            row["converged"] = True
        except TimeoutError as error:
            row["converged"], row["wall"] = False, float("nan")
            row["not_converged"] = str(error)
        finally:
            row["jetstream_converging"] = dict(audit.snapshot())
            audit.close()
        row["cpu_converging"] = dict(bench.cpu_seconds() - cpu_before)
        row["flow_control_converging"] = flow_control_delta(waits_before, bench.flow_control())
        bench.controller.check()
        row["writes_converging"] = dict(bench.writes() - writes_before)
        row["rss"] = rss_mib(bench.controller.pid)
        row["peak"] = bench.controller.peak_mib()
        for each in watches:
            each.count_from()
        writes_after = bench.writes()
        time.sleep(args.settle)
        row["late_writes"] = dict(bench.writes() - writes_after)
        row["late_changes"] = sum(sum(each.changes.values()) for each in watches)
        if idle and row["converged"]:
            for each in watches:
                each.count_from()
            audit = ApiAudit([bench.nats.url])
            try:
                writes_before, api_before = bench.writes(), audit.snapshot()
                time.sleep(args.idle_seconds)
                writes, api = bench.writes() - writes_before, audit.snapshot() - api_before
            finally:
                audit.close()
            per_minute = 60.0 / args.idle_seconds
            row["idle"] = {
                "k8s_writes_per_min": foreground(writes) * per_minute,
                "k8s_writes": breakdown(writes, per_minute),
                "status_changes_per_min": sum(sum(w.changes.values()) for w in watches)
                * per_minute,
                "nats_requests_per_min": sum(api.values()) * per_minute,
                "nats_requests": breakdown(api, per_minute),
            }
            row["drift"] = asyncio.run(
                drift_latency(
                    bench.nats.url, prefix, args.nack_drift_samples, args.nack_drift_timeout, True
                )
            )
    if row["converged"]:
        row["deletion"] = deletion(
            bench.delete_one,
            bench.objects,
            namespace,
            bench.nats.url,
            prefix,
            GROUP,
            VERSION,
            cpu=bench.cpu_seconds,
        )
    row["errors"], row["first_error"] = bench.controller.log_errors()
    bench.controller.stop()  # the floor is measured with the servers to itself
    row["nats"] = asyncio.run(floor_nats(bench.nats.url, f"F{size}", size))
    apply_namespace = bench.namespace(f"apply-only-{size}")
    cpu_before = bench.cpu_seconds()
    row["apply"] = bench.apply_all(apply_namespace, size, f"A{size}")
    row["cpu_applying_alone"] = dict(bench.cpu_seconds() - cpu_before)
    row["patches"] = floor_status_patches(
        bench.as_controller, apply_namespace, size, GROUP, VERSION
    )
    row["delete_alone"] = delete_alone(
        bench.delete_one, bench.objects, apply_namespace, GROUP, VERSION
    )
    row["floor"] = row["nats"] + row["patches"]
    row["ratio"] = row["wall"] / row["floor"]
    row["apply_slowdown"] = row["created"] / row["apply"]
    return row


def run_one(nack: Nack, mode: str, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh control plane and nats-server for every size, so sizes do not affect each other."""
    with tempfile.TemporaryDirectory(prefix=f"nack-bench-{mode}-{size}-") as directory:
        bench = Bench(Path(directory), nack, mode, args.identities, args.apply_order)
        try:
            bench.start()
            return measure(bench, size, args, idle=size == args.sizes[-1])
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


def table(nack: Nack, rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"NACK {nack.version} ({nack.binary}), CRDs {GROUP}/{VERSION} from {nack.crds}",
        "",
        "| NACK mode | N streams + N consumers | wall (s) | floor (s): nats-py + status patches "
        "| ratio | applying alone (s) | applying while converging (s) | slowdown "
        "| RSS end / peak (MiB) | writes while converging (per resource) "
        f"| writes in {args.settle:.0f} s after Ready | klog errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "failed" in row:
            last = (row["log_tail"].strip().splitlines() or [""])[-1][:200]
            lines.append(f"| {row['mode']} | {row['size']} | failed: {row['failed']} {last} |")
            continue
        wall, ratio = f"{row['wall']:.1f}", f"{row['ratio']:.2f}x"
        if not row["converged"]:
            wall, ratio = f"did not converge: {row['not_converged']}", "n/a"
        converging = Counter(row["writes_converging"])
        lines.append(
            f"| {row['mode']} | {row['size']} | {wall} "
            f"| {row['floor']:.1f} ({row['nats']:.1f} + {row['patches']:.1f}) | {ratio} "
            f"| {row['apply']:.1f} | {row['created']:.1f} | {row['apply_slowdown']:.2f}x "
            f"| {row['rss']:.0f} / {row['peak']:.0f} "
            f"| {breakdown(converging)} ({foreground(converging) / (2 * row['size']):.2f}) "
            f"| {breakdown(Counter(row['late_writes']))} | {row['errors']} |"
        )
    for row in rows:
        if "idle" not in row:
            continue
        idle, drift = row["idle"], row["drift"]
        lines += [
            "",
            f"NACK {row['mode']}, idle at N={row['size']} over {args.idle_seconds:.0f} s: "
            f"Kubernetes writes/min (not counting leases) {idle['k8s_writes_per_min']:.1f} "
            f"({idle['k8s_writes']}); status changes/min {idle['status_changes_per_min']:.1f}; "
            f"JetStream API requests/min {idle['nats_requests_per_min']:.1f} "
            f"({idle['nats_requests_per_min'] * RESYNC_INTERVAL / 60:.1f} per "
            f"{RESYNC_INTERVAL:.0f} s; {idle['nats_requests']})",
            f"- drift repair, {drift['samples']} streams changed at once: "
            f"{drift['changes_repaired']}/{drift['samples']} repaired within "
            f"{drift['timeout_s']:.0f} s, p50 {drift['change_p50_ms']:.0f} ms, "
            f"p99 {drift['change_p99_ms']:.0f} ms; deleted at once: "
            f"{drift['deletions_repaired']}/{drift['samples']} recreated, "
            f"p50 {drift['delete_p50_ms']:.0f} ms",
        ]
    deletions = [row for row in rows if "deletion" in row]
    if deletions:
        lines += ["", "Deletion, as for ours (Streams, then Consumers; 8 requests at a time):"]
        for mode in dict.fromkeys(row["mode"] for row in deletions):
            lines += deletion_lines(f"NACK {mode}", [r for r in deletions if r["mode"] == mode])
    lines += [""] + [
        f"- NACK {row['mode']} N={row['size']}, {cpu_line(row)}"
        for row in rows
        if "cpu_converging" in row
    ]
    lines += [
        f"- NACK {row['mode']} N={row['size']}, {jetstream_line(row)}"
        for row in rows
        if "jetstream_converging" in row
    ]
    lines += [
        f"- {row['mode']} N={row['size']}: first klog error: `{row['first_error']}`"
        for row in rows
        if row.get("first_error")
    ]
    return "\n".join(lines)


def run_all(binary: Path, crds: Path | None, sizes: list[int], args: argparse.Namespace) -> str:
    """Every mode at every size; idle and drift at the largest. Returns the Markdown."""
    binary = binary.expanduser()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise SystemExit(f"NACK's controller is not an executable at {binary}")
    if crds is None or not crds.expanduser().is_file():
        raise SystemExit(f"NACK's CRDs are not at {crds}: pass --nack-crds (deploy/crds.yml)")
    nack = Nack.inspect(binary, crds.expanduser(), getattr(args, "nack_version", None))
    modes = list(getattr(args, "nack_modes", None) or MODES)
    if "control-loop" not in nack.flags:
        modes = [mode for mode in modes if mode != "control-loop"]
    settings = argparse.Namespace(**{**vars(args), "sizes": sorted(sizes)})
    for name, default in (
        ("timeout", 1800.0),
        ("nack_drift_samples", 20),
        ("nack_drift_timeout", 90.0),
        ("apply_order", "kinds"),
    ):
        if not hasattr(settings, name):
            setattr(settings, name, default)
    rows = []
    for mode in modes:
        for size in sorted(sizes):
            print(f"NACK {mode} N={size} ...", flush=True)
            row = run_one(nack, mode, size, settings)
            print(json.dumps(row, default=str), flush=True)
            rows.append(row)
    return table(nack, rows, settings)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per convergence")
    parser.add_argument("--modes", dest="nack_modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--nack-bin", type=Path, default=os.environ.get("NACK_BIN"))
    parser.add_argument("--nack-crds", type=Path, default=os.environ.get("NACK_CRDS"))
    parser.add_argument("--nack-version", help="label for the tables, e.g. v0.22.4-9-gf6dad09")
    parser.add_argument("--settle", type=float, default=45)
    parser.add_argument("--idle-seconds", type=float, default=120)
    parser.add_argument("--nack-drift-samples", type=int, default=20)
    parser.add_argument("--nack-drift-timeout", type=float, default=90)
    parser.add_argument("--deadline", type=float, default=4 * 3600, help="seconds for everything")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the .md goes")
    parser.add_argument("--identities", choices=identities.MODES, default="admin")
    parser.add_argument("--apply-order", choices=APPLY_ORDERS, default="kinds")
    args = parser.parse_args()
    if args.nack_bin is None:
        parser.error("--nack-bin (or NACK_BIN) is required: see docs/benchmarks.md")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    deadline_guard(args.deadline)
    text = f"Machine: {machine()}\n\n" + run_all(args.nack_bin, args.nack_crds, args.sizes, args)
    print(text)
    save_result("nack", text, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
