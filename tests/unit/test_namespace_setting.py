"""JETSTREAM_OPERATOR_NAMESPACES as kopf reads it: kopf's own matcher decides, as at run time."""

from __future__ import annotations

import pytest
from kopf._cogs.structs.references import NamespaceName, match_namespace

from jetstream_operator.settings import OperatorSettings

NAMESPACES = ["orders", "billing", "team-a", "team-b", "team-x", "kube-system", "default"]


def watched(setting: str) -> set[str]:
    patterns = OperatorSettings(namespaces=setting).kopf_namespace_patterns()
    return {
        name
        for name in NAMESPACES
        if any(match_namespace(NamespaceName(name), pattern) for pattern in patterns)
    }


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("orders", {"orders"}),
        ("orders,billing", {"orders", "billing"}),  # one kopf pattern would watch orders alone
        ("team-*,orders", {"team-a", "team-b", "team-x", "orders"}),
        ("team-*,!team-x", {"team-a", "team-b"}),
        ("!team-x,team-*", {"team-a", "team-b"}),  # order does not matter
        ("team-*, orders, !team-x", {"team-a", "team-b", "orders"}),
        ("!kube-*,!team-*", {"orders", "billing", "default"}),  # "everything else"
    ],
)
def test_entries_add_and_negations_remove(setting: str, expected: set[str]) -> None:
    assert watched(setting) == expected


def test_no_setting_means_no_patterns() -> None:
    assert OperatorSettings(namespaces="").kopf_namespace_patterns() == []
