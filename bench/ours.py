"""Our operator at one size on fresh servers (convergence; at the idle size idle cost, drift
repair and a restart; deletion; the floor and the ideal controller), and two operators that
split the work (--split)."""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apiserver_profile
from convergence import add_floor, add_ideal, convergence, stream_kind
from deletion import deletion
from drift import drift_latency
from harness import ApiAudit, rss_mib
from idle import after_drift, idle_cost, idle_kinds, restart
from servers import Bench, keep_logs
from watches import wait_ready, watching

from jetstream_operator import GROUP


def run_size(size: int, args: argparse.Namespace) -> dict[str, Any]:
    """One size on fresh servers: convergence and settling; at the idle size, idle cost per kind,
    drift repair and a restart; then the floor on the same servers."""
    idle = size == args.idle_size
    with tempfile.TemporaryDirectory(prefix=f"jso-bench-{size}-") as directory:
        bench = Bench(Path(directory), cluster=idle)
        try:
            bench.start()
            recording = profile_recording(bench, size, args)
            row = convergence(
                bench,
                size,
                args.settle,
                [f"bench-{size}"],
                before_apply=recording.start if recording else None,
            )
            if recording is not None:
                recording.join()
                row["apiserver_profile"] = {
                    "path": str(recording.path),
                    "seconds": recording.seconds,
                    "shares": apiserver_profile.shares(recording.path),
                    "error": str(recording.error or ""),
                }
            if idle:
                kinds = idle_kinds(bench, args.kind_count)
                bench_watches = [
                    bench.watch(f"bench-{size}", "streams", kind_of=stream_kind),
                    bench.watch(f"bench-{size}", "consumers"),
                ]
                with watching(kinds + bench_watches):
                    wait_ready(bench_watches, size, timeout=120)
                    time.sleep(args.settle)
                    audit = ApiAudit(bench.nats_urls())
                    try:
                        row["idle"] = idle_cost(
                            bench, args.idle_seconds, kinds + bench_watches, audit
                        )
                    finally:
                        audit.close()
                    row["idle_rss"] = bench.operator_rss_mib()
                    drift_before = bench.drift_counts()
                    row["drift"] = asyncio.run(
                        drift_latency(bench.nats.url, f"B{size}", args.drift_samples)
                    )
                    row["drift_at_once"] = asyncio.run(  # as nack_bench measures NACK
                        drift_latency(
                            bench.nats.url, f"B{size}", args.nack_drift_samples, 70.0, True
                        )
                    )
                    row["after_drift"] = after_drift(bench, kinds + bench_watches)
                    row["drift_counts"] = dict(bench.drift_counts() - drift_before)
                    row["restart"] = restart(bench, kinds + bench_watches, args.restart_seconds)
            row["deletion"] = deletion(
                bench.delete_one,
                bench.objects,
                f"bench-{size}",
                bench.nats.url,
                f"B{size}",
                cpu=bench.cpu_seconds,
            )
            add_floor(bench, row)
            if args.ideal:
                add_ideal(bench, row)
        finally:
            bench.stop()
            keep_logs(bench, args.keep_logs, f"{size}")
    print(json.dumps(row), flush=True)
    return row


def profile_recording(
    bench: Bench, size: int, args: argparse.Namespace
) -> apiserver_profile.ProfileRecording | None:
    if args.apiserver_profile is None:
        return None
    args.apiserver_profile.mkdir(parents=True, exist_ok=True)
    path = args.apiserver_profile / f"kube-apiserver-{size}-{datetime.now(UTC):%Y%m%d-%H%M}.pprof"
    return apiserver_profile.ProfileRecording(bench.plane, args.apiserver_profile_seconds, path)


SHARD_LABEL = f"{GROUP}/shard"


SPLITS = {
    "namespaces": "disjoint namespace sets",
    "labels": f"one namespace, {SHARD_LABEL}=a and =b",
}


def run_split(size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Two operators on disjoint namespace sets (JETSTREAM_OPERATOR_NAMESPACES globs), the
    resources spread evenly over one namespace of each; or, `--split-by labels`, on one
    namespace, every other stream and its consumer labelled for each
    (JETSTREAM_OPERATOR_SELECTOR)."""
    with tempfile.TemporaryDirectory(prefix=f"jso-split-{size}-") as directory:
        bench = Bench(Path(directory))
        try:
            if args.split_by == "labels":
                bench.start(shards=[{SHARD_LABEL: "a"}, {SHARD_LABEL: "b"}])
                names = [f"split-{size}"]
            else:
                bench.start(namespaces=["warm-up,split-a-*", "split-b-*"])
                names = [f"split-a-{size}", f"split-b-{size}"]
            row = convergence(bench, size, args.settle, names)
            row["namespaces"] = names
            row["split_by"] = args.split_by
            row["rss_each"] = [rss_mib(each.pid) for each in bench.operators]
            add_floor(bench, row)
        finally:
            bench.stop()
            keep_logs(bench, args.keep_logs, f"split-{size}")
    print(json.dumps(row), flush=True)
    return row
