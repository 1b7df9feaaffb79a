"""Make the models' CEL rules cheaper without changing what they accept.

The rules were written for the CRDs, where kube-apiserver ran every one on every write, status
patches included, and each field a rule read cost a copy of the object's property schemas
(bench/results/diary-2026-11.md, the runs of 2026-11-25 03:04-03:34). They now run in
admission policies (policygen.py), only when a spec changes; what is folded here still saves
work there, and a rule placed on its field names that field in its refusal.

A field with a CRD default is always present when a rule runs: the API server applies defaults
to the request and to the stored object before admission. So a presence test on it is a wasted
read. The rule helpers test presence everywhere (they do not know which fields have defaults);
this module drops those tests where the defaults are known.

A rule that reads one always-present field and nothing else (`self.name == oldSelf.name`,
`!oldSelf.sealed || self.sealed`) says the same on that field's own schema node; it runs exactly
when it ran before, since the field is there in every old and new object. Such rules are moved
there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

JsonSchema = dict[str, Any]

RULES = "x-kubernetes-validations"

# Where an operand of `&&` or `||` may start, so that removing a `true && ` or `false || `
# there leaves the rest of the same chain. After `==`, `!` or a function name it may not.
_OPERAND_START = r"(^|\(|&& |\|\| )"


def always_present(node: JsonSchema) -> set[str]:
    """Properties of an object schema that defaulting always fills (and that cannot be null)."""
    properties: dict[str, JsonSchema] = node.get("properties") or {}
    return {
        name
        for name, schema in properties.items()
        if "default" in schema and not schema.get("nullable", False)
    }


def without_presence_tests(rule: str, present: set[str]) -> str:
    """The rule with `has()` of always-present fields folded away where it is an operand of a
    chain: `has(f) && x` -> `x`, `!has(f) || x` -> `x`,
    `has(self.f) == has(oldSelf.f) && x` -> `x`."""
    for field in sorted(present):
        name = re.escape(field)
        both = rf"has\(self\.{name}\) == has\(oldSelf\.{name}\) && "
        rule = re.sub(_OPERAND_START + both, r"\1", rule)
        rule = re.sub(_OPERAND_START + rf"has\((?:self|oldSelf)\.{name}\) && ", r"\1", rule)
        rule = re.sub(r"(^|\()" + rf"!has\((?:self|oldSelf)\.{name}\) \|\| ", r"\1", rule)
    return rule


def lighten_rules(schema: JsonSchema) -> JsonSchema:
    """Rewrite, in place, the rules of every object schema in `schema`; returns it."""
    for node in _objects(schema):
        present = always_present(node)
        if present and RULES in node:
            for rule in node[RULES]:
                rule["rule"] = without_presence_tests(rule["rule"], present)
    return move_single_field_rules(schema)


_FIELD_READ = re.compile(r"\b(?:self|oldSelf)\.([A-Za-z_][A-Za-z0-9_]*)")
_ANY_SELF = re.compile(r"\b(?:self|oldSelf)\b")


def only_field_read(rule: JsonSchema) -> str | None:
    """The one field a rule reads when it reads nothing else of its object: no presence test,
    no other field, no `self` on its own, no message expression."""
    text = str(rule.get("rule", ""))
    if "has(" in text or "messageExpression" in rule:
        return None
    fields = set(_FIELD_READ.findall(text))
    if len(fields) != 1 or len(_ANY_SELF.findall(text)) != len(_FIELD_READ.findall(text)):
        return None
    return str(fields.pop())


def _always_there(node: JsonSchema) -> set[str]:
    return always_present(node) | set(node.get("required") or [])


def move_single_field_rules(schema: JsonSchema) -> JsonSchema:
    """Move, in place, every rule that reads only one always-present field onto that field."""
    for node in _objects(schema):
        there = _always_there(node)
        kept = []
        for rule in node.get(RULES, []):
            field = only_field_read(rule)
            if field is None or field not in there:
                kept.append(rule)
                continue
            moved = dict(rule)
            moved["rule"] = re.sub(
                rf"\b(self|oldSelf)\.{re.escape(field)}\b", r"\1", str(rule["rule"])
            )
            node["properties"][field].setdefault(RULES, []).append(moved)
        if kept:
            node[RULES] = kept
        else:
            node.pop(RULES, None)
    return schema


def movable_rules(schema: JsonSchema) -> list[str]:
    """Rules still on an object that could sit on the one always-present field they read."""
    return [
        str(rule["rule"])
        for node in _objects(schema)
        for rule in node.get(RULES, [])
        if (field := only_field_read(rule)) is not None and field in _always_there(node)
    ]


def needless_presence_tests(schema: JsonSchema) -> list[str]:
    """`has()` tests of always-present fields that are still in the rules, as "field: rule"."""
    found = []
    for node in _objects(schema):
        for field in sorted(always_present(node)):
            pattern = re.compile(rf"has\((?:self|oldSelf)\.{re.escape(field)}\)")
            found += [
                f"{field}: {rule['rule']}"
                for rule in node.get(RULES, [])
                if pattern.search(rule["rule"])
            ]
    return found


def _objects(node: Any) -> Iterator[JsonSchema]:
    if isinstance(node, dict):
        if "properties" in node:
            yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for item in node:
            yield from _objects(item)
