"""kube-apiserver's CPU for one write on the Stream or Consumer CRD, with and without its CEL rules.

The operator's convergence is bound by the API server's CPU on a small machine (see
docs/benchmarks.md), so what one write costs there is the figure to know: a create, a metadata
patch (as kopf's finalizer), a status patch and a Normal Event about the object, `--count` of
each, 8 at a time, on a fresh control plane; then a new object's first status as the floor
writes it and as the operator does, to show what the operator's larger status costs. The same
CRD is served a second time under another
group with every `x-kubernetes-validations` rule removed, to show what the rules cost, and with
`--baseline` a third time as another version of the CRD file had it (to compare a change to the
rules), and with `--policy` a fourth time without rules but with the same rules in a
ValidatingAdmissionPolicy bound to the kind's own resource (not its status), as a design the
operator could move to (docs/benchmarks.md, 2026-11-28 13:27). Later phases of one API server
cost more than earlier ones (more objects, a bigger
heap), so the variants are measured in `--rounds` rounds, every other one in reverse order, and
the figures are their sums:

    .venv/bin/python bench/write_cost.py --count 1000
    git show HEAD~1:crds/consumers.jetstream-operator.io.yaml > /tmp/before.yaml
    .venv/bin/python bench/write_cost.py --kind Consumer --baseline /tmp/before.yaml
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from operator_bench import machine, process_cpu_seconds, save_result

from jetstream_operator.api.crdgen import all_crds
from jetstream_operator.api.status import LAST_HANDLED_FIELD
from jetstream_operator.devenv.controlplane import ControlPlane
from jetstream_operator.handlers.results import Result
from jetstream_operator.handlers.status_writes import status_changes
from jetstream_operator.k8s.crds import apply_crds
from jetstream_operator.reconcile.conditions import Outcome
from jetstream_operator.reconcile.consumer_plan import consumer_live_state
from jetstream_operator.reconcile.live_state import stream_live_state

BARE_GROUP = "bare.bench.invalid"
BASELINE_GROUP = "baseline.bench.invalid"
POLICY_GROUP = "policy.bench.invalid"
INVALID = {
    "Stream": {"name": "BAD", "subjects": ["bad.>"], "mirrorDirect": True},
    "Consumer": {"durableName": "BAD", "streamName": "S", "streamRef": "s"},
}
"""A spec each kind's rules refuse: the policy must be seen refusing it before it is measured."""
SPECS: dict[str, Callable[[int], dict[str, Any]]] = {
    "Stream": lambda i: {"name": f"S{i}", "subjects": [f"s{i}.>"]},
    "Consumer": lambda i: {"durableName": f"C{i}", "streamName": f"S{i}"},
}


def without_rules(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_rules(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [without_rules(v) for v in node]
    return node


def policy_rules(schema: dict[str, Any], path: str = "spec") -> list[tuple[str, dict[str, Any]]]:
    """Every rule of a spec schema with the CEL path of its `self`: `spec`, `spec.mirror`,
    `spec.sources[]` (each item)."""
    found = [(path, rule) for rule in schema.get("x-kubernetes-validations", [])]
    for name, sub in (schema.get("properties") or {}).items():
        found += policy_rules(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        found += policy_rules(schema["items"], f"{path}[]")
    return found


def policy_expression(path: str, rule: str) -> str:
    """A CRD rule as a policy's validation: `self` and `oldSelf` become the object's and the
    old object's field, checked where the CRD would check it (the field present, and for a
    transition rule present before too, on an update)."""
    transition = re.search(r"\boldSelf\b", rule) is not None
    if "[]" in path:
        array, rest = path.split("[]", 1)
        assert not transition and not rest, path
        item = re.sub(r"\bself\b", "item", rule)
        return f"!has(object.{array}) || object.{array}.all(item, {item})"
    guards = []
    parts = path.split(".")
    for depth in range(2, len(parts) + 1):
        guards.append(f"has(object.{'.'.join(parts[:depth])})")
        if transition:
            guards.append(f"has(oldObject.{'.'.join(parts[:depth])})")
    if transition:
        guards.insert(0, "request.operation == 'UPDATE'")
    body = re.sub(r"\boldSelf\b", f"oldObject.{path}", rule)
    body = re.sub(r"\bself\b", f"object.{path}", body)
    return f"!({' && '.join(guards)}) || ({body})" if guards else body


def policy_for(crd: dict[str, Any]) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy holding the CRD's rules, and its binding: for creations and
    updates of the kind's own resource (never its status) that change the spec of an object
    not being deleted."""
    version = crd["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    name = crd["metadata"]["name"]
    validations = []
    for path, rule in policy_rules(spec):
        validation = {"expression": policy_expression(path, rule["rule"])}
        if "messageExpression" in rule:  # evaluated only once the expression failed
            message = re.sub(r"\boldSelf\b", f"oldObject.{path}", rule["messageExpression"])
            validation["messageExpression"] = re.sub(r"\bself\b", f"object.{path}", message)
        if "message" in rule:
            validation["message"] = rule["message"]
        validations.append(validation)
    resource = {
        "apiGroups": [crd["spec"]["group"]],
        "apiVersions": [version["name"]],
        "operations": ["CREATE", "UPDATE"],
        "resources": [crd["spec"]["names"]["plural"]],
    }
    changed = "oldObject == null || oldObject.spec != object.spec"
    conditions = [
        {"name": "spec-changed", "expression": changed},
        {"name": "not-deleting", "expression": "!has(object.metadata.deletionTimestamp)"},
    ]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [resource]},
            "matchConditions": conditions,
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def refused_by_policy(api: Any, crd: dict[str, Any], within: float = 30.0) -> None:
    """Wait until the policy refuses an invalid object of the CRD: it takes effect once
    kube-apiserver's informer has it, and a policy that refuses nothing would measure nothing.
    Only a refusal naming the policy counts; any other error ends the run."""
    objects = client.CustomObjectsApi(api)
    group, version = crd["spec"]["group"], crd["spec"]["versions"][0]["name"]
    plural, kind = crd["spec"]["names"]["plural"], crd["spec"]["names"]["kind"]
    deadline, attempt = time.monotonic() + within, 0
    while time.monotonic() < deadline:
        name = f"invalid-{attempt}"
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": kind,
            "metadata": {"name": name},
            "spec": INVALID[kind],
        }
        try:
            objects.create_namespaced_custom_object(group, version, "default", plural, body)
        except client.ApiException as error:
            if "ValidatingAdmissionPolicy" not in str(error.body):
                raise
            message = json.loads(error.body or "{}").get("message")
            print(f"policy in effect: {message}", flush=True)
            return
        objects.delete_namespaced_custom_object(group, version, "default", plural, name)
        attempt += 1
        time.sleep(0.5)
    raise SystemExit("the policy refused nothing")


def regrouped(crd: dict[str, Any], group: str) -> dict[str, Any]:
    """The CRD served under another API group, so several versions of it coexist."""
    crd = copy.deepcopy(crd)
    crd["spec"]["group"] = group
    crd["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{group}"
    return crd


def variants(kind: str, baseline: Path | None, policy: bool) -> dict[str, dict[str, Any]]:
    current = next(crd for crd in all_crds() if crd["spec"]["names"]["kind"] == kind)
    found = {"with CEL rules": current, "without": regrouped(without_rules(current), BARE_GROUP)}
    if policy:
        found["rules in a policy"] = regrouped(current, POLICY_GROUP)
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
    parser.add_argument(
        "--policy", action="store_true", help="also the rules in a ValidatingAdmissionPolicy"
    )
    args = parser.parse_args()
    crds = variants(args.kind, args.baseline, args.policy)
    policies = policy_for(crds["rules in a policy"]) if args.policy else []
    if policies:
        crds["rules in a policy"] = without_rules(crds["rules in a policy"])
    with tempfile.TemporaryDirectory(prefix="write-cost-") as directory:
        plane = ControlPlane(Path(directory) / "cp")
        plane.start()
        try:
            api = config.new_client_from_config(str(plane.kubeconfig))  # type: ignore[no-untyped-call]
            apply_crds(api, list(crds.values()))
            if policies:
                admission = client.AdmissionregistrationV1Api(api)
                admission.create_validating_admission_policy(policies[0])  # type: ignore[arg-type]
                admission.create_validating_admission_policy_binding(policies[1])  # type: ignore[arg-type]
                refused_by_policy(api, crds["rules in a policy"])
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
