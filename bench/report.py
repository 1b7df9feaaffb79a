"""The Markdown of an operator_bench.py run, for docs/benchmarks.md and bench/results/."""

from __future__ import annotations

import argparse
import os
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import apiserver_profile
from deletion import deletion_lines
from harness import RESYNC_INTERVAL, breakdown, cpu_line, foreground, jetstream_line, machine
from idle import idle_resources
from ours import SPLITS
from servers import OPERATOR_ENV, Bench
from watches import TIMELINE_SHARES


def report(rows: list[dict[str, Any]], extras: dict[str, Any], args: argparse.Namespace) -> str:
    settings = ", ".join(f"{k}={v}" for k, v in sorted(OPERATOR_ENV.items())) or "defaults"
    lines = [
        f"Machine: {machine()}; operator settings: {settings}; identities: {Bench.identity_mode}; "
        f"applied: {Bench.apply_order}; finalizer at admission: "
        f"{'on' if Bench.admission_finalizer else 'off'}",
        "",
        *(convergence_table(rows) if rows else []),
    ]
    if any("deletion" in row for row in rows):
        lines += [
            "",
            "Deletion, `kubectl delete -f` of the applied resources (Streams, then Consumers; 8 "
            "requests at a time); alone: the same requests for the objects applied alone, with "
            "the operator stopped (their finalizers stay):",
            *deletion_lines("ours", rows),
        ]
    idle_row = next((row for row in rows if "idle" in row), None)
    if idle_row:
        idle, drift, again = idle_row["idle"], idle_row["drift"], idle_row["restart"]
        lines += [
            "",
            f"Idle, N={idle_row['size']} plus {args.kind_count} R3 and {args.kind_count} R1 "
            f"streams with a consumer each, {args.kind_count} KeyValues and {args.kind_count} "
            "ObjectStores (half R3) on a NatsConnection to a 3-node cluster, "
            f"{idle['seconds']:.0f} s after {args.settle:.0f} s settling:",
            f"- Kubernetes writes/min (not counting leases): {idle['k8s_writes_per_min']:.1f}; "
            f"all by verb and resource: {idle['k8s_writes']}",
            "- status changes/min by kind: "
            + (", ".join(f"{k} {v:.1f}" for k, v in sorted(idle["kind_changes"].items())) or "none")
            + f"; fields changed: {breakdown(Counter(idle['changed_fields']))}",
            *first_changes(idle),
            f"- JetStream API requests (audit advisories) per {RESYNC_INTERVAL:.0f} s resync: "
            f"{idle['nats_per_resync']:.1f} (1 per 256 resources = "
            f"{idle_resources(idle_row['size'], args.kind_count) / 256:.1f}; N/256 = "
            f"{idle_row['size'] / 256:.1f}); "
            f"by request: {idle['nats_requests']}",
            "- the operator's own count, per minute: "
            + (
                ", ".join(
                    f"{op} {rate:.1f}"
                    for op, rate in sorted(idle["operator_requests_per_min"].items())
                )
                or "none"
            ),
            f"- operator RSS idle: {idle_row['idle_rss']:.0f} MiB",
            "",
            f"Drift repair over {drift['samples']} streams: change p50 "
            f"{drift['change_p50_ms']:.0f} ms, p99 {drift['change_p99_ms']:.0f} ms "
            f"({drift['changes_repaired']}/{drift['samples']} within {drift['timeout_s']:.0f} s); "
            f"deletion p50 {drift['delete_p50_ms']:.0f} ms, p99 {drift['delete_p99_ms']:.0f} ms "
            f"({drift['deletions_repaired']}/{drift['samples']})",
            f"- {idle_row['drift_at_once']['samples']} streams changed at once: p50 "
            f"{idle_row['drift_at_once']['change_p50_ms']:.0f} ms, p99 "
            f"{idle_row['drift_at_once']['change_p99_ms']:.0f} ms "
            f"({idle_row['drift_at_once']['changes_repaired']} repaired); deleted at once: p50 "
            f"{idle_row['drift_at_once']['delete_p50_ms']:.0f} ms, p99 "
            f"{idle_row['drift_at_once']['delete_p99_ms']:.0f} ms "
            f"({idle_row['drift_at_once']['deletions_repaired']} recreated)",
        ]
        settling = idle_row.get("after_drift")
        if settling is not None:
            lines += [
                f"- After the repairs: last write {settling['quiet_after_s']:.1f} s after the "
                f"drift runs (quiet for 35 s: {'yes' if settling['settled'] else 'no'}); writes "
                f"{settling['writes'] or 'none'}; fields changed: "
                f"{breakdown(Counter(settling['changed_fields']))}",
                *first_changes(settling),
                "- the operator's own count over the drift runs and after: "
                + breakdown(Counter(idle_row.get("drift_counts") or {})),
            ]
        lines += [
            "",
            f"Restart with everything in place: healthy after {again['healthy_s']:.1f} s; "
            f"in the next {again['seconds']:.0f} s, status changes "
            f"{again['status_changes'] or 'none'}, writes {again['writes']}, "
            f"last write {again['last_write_s']:.1f} s after start; fields changed: "
            f"{breakdown(Counter(again['changed_fields']))}; operator RSS at the end "
            f"{again.get('rss', 0.0):.0f} MiB",
        ]
        lines += first_changes(again)
    if "busy" in extras:
        b = extras["busy"]
        lines += [
            "",
            f"Busy: {b['size']} streams receiving {b['published_per_s']:.0f} msg/s in all for "
            f"{b['seconds']:.0f} s: {b['status_writes_per_min']:.1f} status writes/min "
            f"(steady budget {b['budget_per_min']:.0f}/min); "
            f"{b.get('status_writes', 0):.0f} in the window, at most "
            f"{b.get('bound_in_window', 0):.0f} allowed (the rate plus one "
            f"resync's bucket); writes/min {b['writes']}",
        ]
    if "heap" in extras:
        h = extras["heap"]
        lines += [
            "",
            f"Heap at N={h['size']} ({2 * h['size']} resources) under tracemalloc: RSS "
            f"{h['rss']:.0f} MiB; Python heap allocated and still held after applying "
            f"{h['traced_after_mib']:.1f} MiB, "
            f"{h['per_resource_kib']:.1f} KiB per resource; the bodies our registry keeps: "
            f"{h['registry_kib']:.1f} KiB per resource ({h['registry_resources']} tracked). "
            "Per resource, by allocating package (KiB): "
            + ", ".join(f"{name} {kib:.1f}" for name, kib in h["by_package"] if abs(kib) >= 0.1),
            "- by file (KiB per resource): "
            + ", ".join(f"{name} {kib:.1f}" for name, kib in h["by_file"]),
        ]
    if "split" in extras:
        by = extras["split"].get("split_by", "namespaces")
        lines += ["", f"Two operators, split by {by} ({SPLITS[by]}):"]
        lines += convergence_table([{**extras["split"], "label": "2 operators"}])
        lines.append(
            f"- RSS each (MiB): {', '.join(f'{v:.0f}' for v in extras['split']['rss_each'])}"
        )
    if "nack" in extras:
        lines += ["", extras["nack"]]
    if "rounds" in extras:
        lines += rounds_lines(extras["rounds"], args.rounds_size)
    return "\n".join(lines)


def convergence_table(rows: list[dict[str, Any]], label: str = "") -> list[str]:
    lines = [
        "| run | N streams + N consumers | wall (s) | floor (s): nats-py + status patches | ratio "
        "| applying alone (s) | applying while converging (s) | slowdown | RSS (MiB) "
        "| streams without consumerCount at last Ready | writes after last Ready "
        "| last write after last Ready (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.get('label', label or 'operator')} | {row['size']} | {row['wall']:.1f} "
            f"| {row['floor']:.1f} ({row['nats']:.1f} + {row['patches']:.1f}) "
            f"| {row['ratio']:.2f}x | {row['apply']:.1f} | {row['created']:.1f} "
            f"| {row['apply_slowdown']:.2f}x | {row['rss']:.0f} | {row['status_incomplete']} "
            f"| {breakdown(Counter(row['late_writes']))} | {row['last_write_after_ready']:.1f} |"
        )
    lines.append("")
    lines += [
        f"- N={row['size']} ({row.get('label', 'operator')}), writes while converging: "
        f"{breakdown(Counter(row['writes_converging']))} "
        f"({foreground(Counter(row['writes_converging'])) / (2 * row['size']):.2f} per resource); "
        f"fields changed after the last Ready: {breakdown(Counter(row['late_fields']))}"
        for row in rows
    ]
    lines += [
        f"- N={row['size']} ({row.get('label', 'operator')}), {jetstream_line(row)}"
        for row in rows
        if "jetstream_converging" in row
    ]
    lines += [
        f"- N={row['size']} ({row.get('label', 'operator')}), seconds until "
        + ", ".join(f"{share:.0%}" for share in TIMELINE_SHARES)
        + " were Ready: "
        + "; ".join(
            f"{plural} " + " / ".join(f"{at:.1f}" for at in times)
            for plural, times in row["timeline"].items()
        )
        + f" (applies done at {row['created']:.1f})"
        for row in rows
        if row.get("timeline")
    ]
    lines += [
        f"- N={row['size']} ({row.get('label', 'operator')}), {cpu_line(row)}"
        for row in rows
        if "cpu_converging" in row
    ]
    lines += [ideal_line(row) for row in rows if "ideal_wall" in row]
    lines += [
        apiserver_profile.line(Path(found["path"]), found["seconds"], found["shares"])
        + (f" (recording failed: {found['error']})" if found["error"] else "")
        for row in rows
        if (found := row.get("apiserver_profile"))
    ]
    return lines


def ideal_line(row: dict[str, Any]) -> str:
    cpu = Counter(row["cpu_ideal"])
    return (
        f"- N={row['size']}, the ideal controller (bench/ideal_controller.py: the floor's "
        f"requests as each object arrives, nothing else): **{row['ideal_wall']:.1f} s, "
        f"{row['ideal_ratio']:.2f}x the floor**, applies {row['ideal_created']:.1f} s "
        f"({row['ideal_apply_slowdown']:.2f}x alone); CPU s: "
        + ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu.most_common())
        + f". CPU bound for any controller (the applies alone and the floor's server work over "
        f"{os.cpu_count()} cores, or the applies' time if longer): {row['cpu_bound']:.1f} s, "
        f"{row['cpu_bound_ratio']:.2f}x the floor"
    )


def first_changes(figures: dict[str, Any]) -> list[str]:
    """The first change of each field, as a line, when there were any: which value was right."""
    examples: dict[str, str] = figures.get("examples") or {}
    if not examples:
        return []
    return [
        "- first change of each field: "
        + "; ".join(f"{key} ({change})" for key, change in sorted(examples.items()))
    ]


def rounds_lines(rounds: list[dict[str, Any]], size: int) -> list[str]:
    def cells(row: dict[str, Any], process: str) -> str:
        if "failed" in row or "wall" not in row:
            return f"failed: {row.get('failed', 'no figures')}"
        cpu = row.get("cpu_converging") or {}
        return (
            f"{row['wall']:.1f} s / {row['ratio']:.2f}x / {row['apply_slowdown']:.2f}x / "
            f"{cpu.get('kube-apiserver', 0.0):.1f}, {cpu.get(process, 0.0):.1f}"
        )

    lines = [
        "",
        f"Alternated rounds at N={size}, ours and NACK legacy, the order flipped every round, "
        "fresh servers for each run:",
        "",
        "| round | ours: wall / ratio / applies slowed / CPU s kube-apiserver, operator | "
        "NACK legacy: wall / ratio / applies slowed / CPU s kube-apiserver, NACK |",
        "|---|---|---|",
    ]
    for index, runs in enumerate(rounds, 1):
        lines.append(
            f"| {index} ({'ours' if runs['first'] == 'ours' else 'NACK'} first) | "
            f"{cells(runs['ours'], 'operator')} | {cells(runs['nack'], 'nack')} |"
        )
    both = [r for r in rounds if all("wall" in r[who] for who in ("ours", "nack"))]
    if both:

        def median(who: str, key: str) -> float:
            return float(statistics.median(r[who][key] for r in both))

        won = sum(r["ours"]["wall"] < r["nack"]["wall"] for r in both)
        lines.append(
            f"- medians over {len(both)} rounds: ours {median('ours', 'wall'):.1f} s "
            f"({median('ours', 'ratio'):.2f}x, applies {median('ours', 'apply_slowdown'):.2f}x), "
            f"NACK legacy {median('nack', 'wall'):.1f} s ({median('nack', 'ratio'):.2f}x, "
            f"applies {median('nack', 'apply_slowdown'):.2f}x); ours faster in {won} of "
            f"{len(both)}"
        )
    lines += [
        f"- round {index}: {ideal_line(runs['ours'])[2:]}"
        for index, runs in enumerate(rounds, 1)
        if "ideal_wall" in runs["ours"]
    ]
    return lines
