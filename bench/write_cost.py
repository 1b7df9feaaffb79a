"""kube-apiserver's CPU for one write on the Stream or Consumer CRD, with its CEL rules where the
operator ships them (a ValidatingAdmissionPolicy), in the CRD, and nowhere.

The operator's convergence is bound by the API server's CPU on a small machine (see
docs/benchmarks.md), so what one write costs there is the figure to know: a create, a metadata
patch (as kopf's finalizer), a status patch and a Normal Event about the object, `--count` of
each, 8 at a time, on a fresh control plane; then a new object's first status as the floor
writes it and as the operator does, to show what the operator's larger status costs. The CRD
as shipped is served with its policy in effect; the same CRD is served a second time under
another group with the rules in its schema (`x-kubernetes-validations`, where they were until
2026-11-28), a third time with no rule at all, and with `--baseline` a fourth time as another
version of the CRD file had it (to compare a change to the schema). Later phases of one API
server cost more than earlier ones (more objects, a bigger heap), so the variants are measured
in `--rounds` rounds, every other one in reverse order, and the figures are their sums:

    .venv/bin/python bench/write_cost.py --count 1000
    git show HEAD~1:crds/consumers.jetstream-operator.io.yaml > /tmp/before.yaml
    .venv/bin/python bench/write_cost.py --kind Consumer --baseline /tmp/before.yaml
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from harness import machine, process_cpu_seconds, save_result
from kubernetes import client, config

from jetstream_devtools.controlplane import ControlPlane
from jetstream_devtools.crds import apply_crds, install_api
from jetstream_operator import GROUP
from jetstream_operator.api.crdgen import crd_for, validated_spec_schema
from jetstream_operator.api.kinds import ALL_KINDS
from jetstream_operator.api.status import LAST_HANDLED_FIELD
from jetstream_operator.handlers.results import Result
from jetstream_operator.handlers.status_writes import status_changes
from jetstream_operator.reconcile.conditions import Outcome
from jetstream_operator.reconcile.consumer_plan import consumer_live_state
from jetstream_operator.reconcile.live_state import stream_live_state

BARE_GROUP = "bare.bench.invalid"
RULES_GROUP = "rules.bench.invalid"
BASELINE_GROUP = "baseline.bench.invalid"
SPECS: dict[str, Callable[[int], dict[str, Any]]] = {
    "Stream": lambda i: {"name": f"S{i}", "subjects": [f"s{i}.>"]},
    "Consumer": lambda i: {"durableName": f"C{i}", "streamName": f"S{i}"},
}


def regrouped(crd: dict[str, Any], group: str) -> dict[str, Any]:
    """The CRD served under another API group, so several versions of it coexist."""
    crd = copy.deepcopy(crd)
    crd["spec"]["group"] = group
    crd["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{group}"
    return crd


def variants(kind: str, baseline: Path | None) -> dict[str, dict[str, Any]]:
    """The kind's CRD as shipped (its rules in its admission policy, which install_api puts in
    place), the same with the rules in the CRD instead, without any rule, and a baseline file."""
    resource_kind = next(each for each in ALL_KINDS if each.kind == kind)
    shipped = crd_for(resource_kind)
    in_crd = copy.deepcopy(shipped)
    schema = in_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"] = validated_spec_schema(resource_kind)
    found = {
        "rules in the policy (shipped)": shipped,
        "rules in the CRD": regrouped(in_crd, RULES_GROUP),
        "no rules": regrouped(shipped, BARE_GROUP),
    }
    if baseline is not None:
        found[f"rules of {baseline.name}"] = regrouped(
            yaml.safe_load(baseline.read_text()), BASELINE_GROUP
        )
    return found


def timed(pid: int, work: Callable[[int], Any], items: Iterable[int]) -> tuple[float, float]:
    """(wall seconds, kube-apiserver CPU seconds) for `work` over `items`, 8 at a time."""
    cpu, started = process_cpu_seconds(pid), time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(work, items))
    return time.perf_counter() - started, process_cpu_seconds(pid) - cpu


def measure(
    plane: ControlPlane, crd: dict[str, Any], count: int, prefix: str = "s"
) -> dict[str, tuple[float, float]]:
    api = config.new_client_from_config(str(plane.kubeconfig))  # type: ignore[no-untyped-call]
    objects, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    group, version = crd["spec"]["group"], crd["spec"]["versions"][0]["name"]
    plural, kind = crd["spec"]["names"]["plural"], crd["spec"]["names"]["kind"]
    pid = next(record.pid for record in plane.records() if record.name == "kube-apiserver")

    def create(i: int, batch: str = "") -> None:
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": kind,
            "metadata": {"name": f"{prefix}{batch}{i}"},
            "spec": SPECS[kind](i),
        }
        objects.create_namespaced_custom_object(group, version, "default", plural, body)

    def status_of_new(batch: str, body: Callable[[int], dict[str, Any]]) -> tuple[float, float]:
        """A status patch onto objects that have none yet, as a new resource's first status."""
        timed(pid, lambda i: create(i, batch), range(count))  # not counted

        def patch(i: int) -> None:
            objects.patch_namespaced_custom_object_status(
                group, version, "default", plural, f"{prefix}{batch}{i}", {"status": body(i)}
            )

        return timed(pid, patch, range(count))

    def finalizer(i: int) -> None:
        patch = {"metadata": {"finalizers": ["bench.invalid/finalizer"]}}
        objects.patch_namespaced_custom_object(
            group, version, "default", plural, f"{prefix}{i}", patch
        )

    def status(i: int) -> None:
        condition = {
            "type": "Ready",
            "status": "True",
            "reason": "Synced",
            "message": "in sync",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        patch = {"status": {"observedGeneration": 1, "conditions": [condition]}}
        objects.patch_namespaced_custom_object_status(
            group, version, "default", plural, f"{prefix}{i}", patch
        )

    def event(i: int) -> None:
        """A Normal Event about the object, as the operator posts one per creation."""
        involved = {"apiVersion": f"{group}/{version}", "kind": kind, "name": f"{prefix}{i}"}
        body: dict[str, Any] = {
            "metadata": {"generateName": "bench-event-"},
            "type": "Normal",
            "reason": "Created",
            "message": f"created S{i}",
            "involvedObject": {**involved, "namespace": "default"},
            "firstTimestamp": "2026-01-01T00:00:00Z",
            "lastTimestamp": "2026-01-01T00:00:00Z",
            "count": 1,
            "source": {"component": "bench"},
        }
        core.create_namespaced_event("default", body)  # type: ignore[arg-type]

    create(count)  # the first object compiles the schema and rules; not counted
    return {
        "create": timed(pid, create, range(count)),
        "metadata patch": timed(pid, finalizer, range(count)),
        "status patch": timed(pid, status, range(count)),
        "event": timed(pid, event, range(count)),
        "first status, the floor's": status_of_new("f", lambda i: {"observedGeneration": 1}),
        "first status, the operator's": status_of_new("o", lambda i: first_status(kind, i)),
    }


def first_status(kind: str, i: int) -> dict[str, Any]:
    """The status the operator writes for a new resource, made by its own functions: the
    conditions, the live state of a new stream or consumer on one server, and kopf's record of
    the spec it handled."""
    if kind == "Stream":
        live = stream_live_state({"config": {"name": f"S{i}", "num_replicas": 1}, "state": {}})
    else:
        config = {"durable_name": f"C{i}", "ack_policy": "explicit"}
        live = consumer_live_state({"stream_name": f"S{i}", "name": f"C{i}", "config": config})
    outcome = Outcome(True, "Created", f"{kind.lower()} {i} matches the spec")
    status = status_changes({}, Result(outcome, status=live), 1)
    status[LAST_HANDLED_FIELD.split(".")[-1]] = json.dumps({"spec": SPECS[kind](i)})
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--kind", choices=sorted(SPECS), default="Stream")
    parser.add_argument("--baseline", type=Path, help="another version of the kind's CRD file")
    parser.add_argument("--rounds", type=int, default=2, help="every other one in reverse order")
    args = parser.parse_args()
    crds = variants(args.kind, args.baseline)
    with tempfile.TemporaryDirectory(prefix="write-cost-") as directory:
        plane = ControlPlane(Path(directory) / "cp")
        plane.start()
        try:
            api = config.new_client_from_config(str(plane.kubeconfig))  # type: ignore[no-untyped-call]
            install_api(api)  # the shipped CRDs and policies, in effect
            apply_crds(api, [crd for crd in crds.values() if crd["spec"]["group"] != GROUP])
            results: dict[str, dict[str, tuple[float, float]]] = {}
            for number in range(args.rounds):
                order = list(crds.items())
                for label, crd in order if number % 2 == 0 else reversed(order):
                    measured = measure(plane, crd, args.count, prefix=f"r{number}-s")
                    for write, (wall, cpu) in measured.items():
                        before = results.setdefault(label, {}).get(write, (0.0, 0.0))
                        results[label][write] = (before[0] + wall, before[1] + cpu)
        finally:
            plane.stop()
    lines = [
        f"Machine: {machine()}",
        "",
        f"| {args.kind}: {args.count} of each, 8 at a time, {args.rounds} rounds "
        "| kube-apiserver CPU per write (ms) | wall (s) |",
        "|---|---|---|",
    ]
    for label, rows in results.items():
        for write, (wall, cpu) in rows.items():
            per_write = 1000 * cpu / (args.count * args.rounds)
            lines.append(f"| {write}, {label} | {per_write:.1f} | {wall:.1f} |")
    text = "\n".join(lines)
    print(text)
    save_result("write-cost", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
