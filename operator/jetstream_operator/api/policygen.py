"""Turn the models' CEL rules into a ValidatingAdmissionPolicy per kind, instead of CRD rules.

kube-apiserver runs every `x-kubernetes-validations` rule of a CRD on every write of a resource,
status patches included (v1.34: the status strategy validates the whole object), and each field
a rule reads costs it a copy of the object's property schemas. While the operator converges
that came to about a quarter of the API server's CPU (bench/results/diary-2026-11.md,
2026-11-28). A policy bound to the kind's own resource never runs on the status subresource,
and with its match conditions it runs only when a spec changes, so the same rules cost nothing
on status writes.

Each rule keeps the meaning it had on its schema node: it is checked when its field is
present, a transition rule (one reading `oldSelf`) only on an update where the field was there
before as well, and a rule on the items of a list on every item. A refusal names every rule the
spec breaks, as the CRD's did. A write that leaves the spec as it was is never checked, so an
object admitted under older rules keeps its labels, its status writes and its finalizer's
removal; a change of its spec is checked with every rule.
"""

from __future__ import annotations

import re
from typing import Any

JsonSchema = dict[str, Any]

RULES = "x-kubernetes-validations"
API_VERSION = "admissionregistration.k8s.io/v1"

SPEC_CHANGED = "oldObject == null || oldObject.spec != object.spec"

_OLD_SELF = re.compile(r"\boldSelf\b")
_SELF = re.compile(r"\bself\b")


def rules_by_path(schema: JsonSchema, path: str = "spec") -> list[tuple[str, JsonSchema]]:
    """Every rule of a schema with the path of its `self`: `spec`, `spec.mirror`, and
    `spec.sources[]` for each item of a list. Rules on map values are not supported."""
    if isinstance(schema.get("additionalProperties"), dict) and _count_rules(
        schema["additionalProperties"]
    ):
        raise ValueError(f"{path}: rules on map values cannot move into a policy")
    found = [(path, rule) for rule in schema.get(RULES, [])]
    for name, sub in (schema.get("properties") or {}).items():
        found += rules_by_path(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        found += rules_by_path(schema["items"], f"{path}[]")
    return found


def without_rules(node: Any) -> Any:
    """A copy of a schema without any CEL rule."""
    if isinstance(node, dict):
        return {k: without_rules(v) for k, v in node.items() if k != RULES}
    if isinstance(node, list):
        return [without_rules(v) for v in node]
    return node


def _count_rules(node: Any) -> int:
    if isinstance(node, dict):
        return len(node.get(RULES, [])) + sum(_count_rules(v) for v in node.values())
    if isinstance(node, list):
        return sum(_count_rules(v) for v in node)
    return 0


def is_transition(rule: str) -> bool:
    return _OLD_SELF.search(rule) is not None


def _on(path: str, text: str, old: str = "oldObject", new: str = "object") -> str:
    text = _OLD_SELF.sub(f"{old}.{path}", text)
    return _SELF.sub(f"{new}.{path}", text)


def policy_expression(path: str, rule: str) -> str:
    """A schema rule as a policy expression on the whole object, checked only where the API
    server would have checked it on the schema."""
    if "[]" in path:
        array, rest = path.split("[]", 1)
        if rest or is_transition(rule):
            raise ValueError(f"{path}: only plain rules on list items can move into a policy")
        return f"!has(object.{array}) || object.{array}.all(item, {_SELF.sub('item', rule)})"
    parts = path.split(".")
    guards = []
    if is_transition(rule):
        guards.append("request.operation == 'UPDATE'")
    for depth in range(2, len(parts) + 1):
        field = ".".join(parts[:depth])
        guards.append(f"has(object.{field})")
        if is_transition(rule):
            guards.append(f"has(oldObject.{field})")
    body = _on(path, rule)
    return f"!({' && '.join(guards)}) || ({body})" if guards else body


def _where(path: str) -> str:
    return path.replace("[]", "")


def cel_string(text: str) -> str:
    """A CEL string literal holding `text`."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def refusal_message(path: str, rule: JsonSchema) -> str:
    """The rule's refusal as a CEL string expression. The API server reports a policy's refusal
    without a field path, so a message that does not name its field is prefixed with it, as
    the CRD's refusal was."""
    where = _where(path)
    if "messageExpression" in rule:
        # Evaluated only after the rule failed, so its field is there.
        if "[]" in path:
            raise ValueError(f"{path}: message expressions on list items are not supported")
        written = str(rule["messageExpression"])
        expression = _on(path, written)
        return expression if where in written else f"{cel_string(where + ': ')} + ({expression})"
    message = str(rule.get("message") or "fails its rule")
    return cel_string(message if where in message else f"{where}: {message}")


def validation_for(rules: list[tuple[str, JsonSchema]]) -> JsonSchema:
    """One validation holding every rule, refusing with the message of each rule that failed:
    separate validations would report only the first, where a CRD reported them all. The
    rules are written out in both expressions rather than shared as policy variables: with
    variables, kube-controller-manager's type check (v1.34) reported no misspelled field in
    90 s (tests/integration/test_admission_policies.py). The message's copy is evaluated only
    after a refusal."""
    checks = [policy_expression(path, str(rule["rule"])) for path, rule in rules]
    failed = [
        f"({check}) ? '' : {refusal_message(path, rule)}"
        for check, (path, rule) in zip(checks, rules, strict=True)
    ]
    return {
        "expression": " && ".join(f"({check})" for check in checks),
        "messageExpression": f"[{', '.join(failed)}].filter(m, m != '').join('; ')",
        # Used only if the expression above could not produce a message.
        "message": "spec: the spec breaks the kind's rules",
        "reason": "Invalid",
    }


def admission_policy(
    name: str,
    group: str,
    version: str,
    plural: str,
    spec_schema: JsonSchema,
    request_checks: tuple[tuple[str, str], ...] = (),
) -> list[JsonSchema]:
    """The policy holding every rule of a spec schema, and its binding: for creations and spec
    changes of the kind's own resource (never its status). `request_checks` follow as
    validations of their own: they read the request (`authorizer`), and are checked once the
    spec keeps its rules."""
    rules = rules_by_path(spec_schema)
    if len(rules) != _count_rules(spec_schema):
        raise ValueError(f"{name}: some rules sit where a policy cannot reach them")
    labels = {"app.kubernetes.io/part-of": "jetstream-operator"}
    policy = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            # A policy that cannot run refuses: the rules are the API's contract.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": [version],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [plural],
                    }
                ]
            },
            "matchConditions": [{"name": "spec-changed", "expression": SPEC_CHANGED}],
            "validations": [
                validation_for(rules),
                *(
                    {"expression": check, "messageExpression": message, "reason": "Forbidden"}
                    for check, message in request_checks
                ),
            ],
        },
    }
    binding = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
