"""Every transition rule of the CRDs (a CEL rule reading `oldSelf`) has a case in
transition_cases.py, so test_transitions_without_policies.py meets each one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from jetstream_operator.api.crdgen import validated_spec_schema
from jetstream_operator.api.kinds import (
    ALL_KINDS,
    ResourceKind,
)
from jetstream_operator.api.policygen import is_transition, rules_by_path

from .transition_cases import CASES, Case

pytestmark = pytest.mark.integration

# ---------------------------------------------------------------------------------------------
# The rules, from the models


@dataclass(frozen=True)
class TransitionRule:
    kind: ResourceKind
    path: str
    rule: str
    message: str

    def guarded_fields(self) -> set[str]:
        """The spec fields the rule compares with their old values."""
        fields = set(re.findall(r"\boldSelf\.(\w+)", self.rule))
        if re.search(r"\boldSelf\b(?!\.)", self.rule):
            fields.add(self.path.split(".")[1])
        return fields


def transition_rules() -> list[TransitionRule]:
    """Every rule reading `oldSelf`, of every kind, as policygen puts it into the policies."""
    found = []
    for kind in ALL_KINDS:
        for path, rule in rules_by_path(validated_spec_schema(kind)):
            if is_transition(str(rule["rule"])):
                message = str(rule.get("message") or "")
                found.append(TransitionRule(kind, path, str(rule["rule"]), message))
    return found


def cases_of(rule: TransitionRule) -> list[Case]:
    return [case for case in CASES if case.kind == rule.kind and case.rule in rule.message]


COVERED_ELSEWHERE = {
    ("NatsUser", "spec.accountRef is immutable"): (
        "test_accounts.py",
        "test_a_users_account_cannot_change",
        {"accountRef"},
    ),
}
"""Rules of kinds the stream-holding harness of test_transitions_without_policies.py cannot
make (a NatsUser needs NATS in operator mode): the test that changes the field with and without
the policy, and the fields it changes."""


def covered_elsewhere(rule: TransitionRule) -> set[str] | None:
    """The fields the other test changes, when it exists; None when the rule has none."""
    for (kind, message), (module, test, fields) in COVERED_ELSEWHERE.items():
        if kind == rule.kind.kind and message in rule.message:
            source = (Path(__file__).parent / module).read_text()
            assert f"def {test}(" in source, f"{module} has no {test}"
            return fields
    return None


def test_every_transition_rule_has_a_case() -> None:
    """A transition rule added later fails here until it has a case; so does a field a rule
    guards (the consumer's fields that cannot change are one rule) that no case changes."""
    rules = transition_rules()
    assert len(rules) >= 20, rules
    missing = [
        f"{r.kind.kind} {r.path}: {r.message}"
        for r in rules
        if not cases_of(r) and covered_elsewhere(r) is None
    ]
    assert not missing, "transition rules without a case:\n" + "\n".join(missing)
    for rule in rules:
        changed = {key for case in cases_of(rule) for key in case.update}
        changed |= covered_elsewhere(rule) or set()
        unchanged = rule.guarded_fields() - changed
        assert not unchanged, f"{rule.kind.kind}: no case changes {unchanged} ({rule.message})"
    for case in CASES:
        matching = [r for r in rules if r.kind == case.kind and case.rule in r.message]
        assert len(matching) == 1, f"{case.name} names {len(matching)} rules"
    assert len({case.name for case in CASES}) == len(CASES)
