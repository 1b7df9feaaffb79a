"""The CRDs are generated from the models; these tests keep them valid and committed."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from jetstream_operator.api.celcost import (
    always_present,
    movable_rules,
    move_single_field_rules,
    needless_presence_tests,
    only_field_read,
    without_presence_tests,
)
from jetstream_operator.api.crdgen import (
    POLICY_SUFFIX,
    all_crds,
    crd_files,
    policy_for,
    validated_spec_schema,
)
from jetstream_operator.api.kinds import ALL_KINDS
from jetstream_operator.api.policygen import (
    RULES,
    admission_policy,
    policy_expression,
    refusal_message,
    rules_by_path,
)

REPO = Path(__file__).resolve().parents[2]


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found.extend(_walk(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_walk(value, f"{path}[{index}]"))
    return found


def test_committed_crds_match_the_models() -> None:
    committed = {p.name: p.read_text() for p in (REPO / "crds").glob("*.yaml")}
    assert committed == crd_files(), "crds/ is stale: run `make crds` and commit the result"


def test_schemas_are_structural() -> None:
    for crd in all_crds():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in _walk(schema):
            assert "$ref" not in node, path
            assert "anyOf" not in node and "oneOf" not in node, path
            assert node.get("type") != "null", path
            if "properties" in node and path.endswith(("spec", "status")):
                assert node.get("type") == "object", path
            assert not ("properties" in node and "additionalProperties" in node), path


def test_every_spec_field_has_a_description() -> None:
    for crd in all_crds():
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        for name, field in spec["properties"].items():
            assert field.get("description"), f"{crd['metadata']['name']} spec.{name}"


def test_rendered_yaml_parses_back() -> None:
    for name, text in crd_files().items():
        kinds = [document["kind"] for document in yaml.safe_load_all(text)]
        if name.endswith(POLICY_SUFFIX):
            assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
        else:
            assert kinds == ["CustomResourceDefinition"]


# -- rules in admission policies -----------------------------------------------------------------


def test_the_crds_carry_no_rules_and_each_policy_carries_every_rule_of_its_kind() -> None:
    """Rules in a CRD cost the API server on every status write (api/policygen.py)."""
    for crd in all_crds():
        assert RULES not in str(crd), crd["metadata"]["name"]
    for kind in ALL_KINDS:
        rules = rules_by_path(validated_spec_schema(kind))
        policy, binding = policy_for(kind)
        assert rules, kind.kind
        validation, *request_checks = policy["spec"]["validations"]
        assert [(check["expression"], check["messageExpression"]) for check in request_checks] == (
            list(kind.request_checks)
        )
        checks = [policy_expression(path, rule["rule"]) for path, rule in rules]
        assert validation["expression"] == " && ".join(f"({check})" for check in checks)
        assert binding["spec"]["policyName"] == policy["metadata"]["name"] == kind.crd_name
        (resource,) = policy["spec"]["matchConstraints"]["resourceRules"]
        # The kind's own resource only: a rule never runs on a status write.
        assert resource["resources"] == [kind.plural]


@pytest.mark.parametrize(
    ("path", "rule", "expression"),
    [
        ("spec", "self.a > 0", "object.spec.a > 0"),
        (
            "spec",
            "self.a == oldSelf.a",
            "!(request.operation == 'UPDATE') || (object.spec.a == oldObject.spec.a)",
        ),
        # Checked only where the field is, and for a transition where it was before too.
        ("spec.mirror", "self.b", "!(has(object.spec.mirror)) || (object.spec.mirror.b)"),
        (
            "spec.tls.key",
            "!oldSelf || self",
            "!(request.operation == 'UPDATE' && has(object.spec.tls) && has(oldObject.spec.tls)"
            " && has(object.spec.tls.key) && has(oldObject.spec.tls.key))"
            " || (!oldObject.spec.tls.key || object.spec.tls.key)",
        ),
        # On every item of a list; `selfish` is another name, not `self`.
        (
            "spec.sources[]",
            "!has(self.selfish) || self.name != ''",
            "!has(object.spec.sources)"
            " || object.spec.sources.all(item, !has(item.selfish) || item.name != '')",
        ),
    ],
)
def test_a_rule_is_checked_where_the_crd_would_have_checked_it(
    path: str, rule: str, expression: str
) -> None:
    assert policy_expression(path, rule) == expression


def test_a_refusal_names_its_field_as_the_crd_did() -> None:
    named = refusal_message("spec.sealed", {"rule": "self", "message": "spec.sealed stays on"})
    assert named == '"spec.sealed stays on"'
    unnamed = refusal_message("spec.sources[]", {"rule": "self.x", "message": 'needs "x"'})
    assert unnamed == '"spec.sources: needs \\"x\\""'
    computed = refusal_message(
        "spec.mirror", {"rule": "self.x", "messageExpression": "string(self.x) + ' is wrong'"}
    )
    assert computed == "\"spec.mirror: \" + (string(object.spec.mirror.x) + ' is wrong')"


def test_every_failing_rule_is_reported_in_one_refusal() -> None:
    """Separate validations would stop at the first that fails; a CRD reported them all."""
    policy, _ = admission_policy(
        "x",
        "g",
        "v1",
        "xs",
        {RULES: [{"rule": "self.a", "message": "spec.a"}, {"rule": "self.b", "message": "b"}]},
    )
    (validation,) = policy["spec"]["validations"]
    assert validation["expression"] == "(object.spec.a) && (object.spec.b)"
    assert validation["messageExpression"] == (
        "[(object.spec.a) ? '' : \"spec.a\", (object.spec.b) ? '' : \"spec: b\"]"
        ".filter(m, m != '').join('; ')"
    )
    assert validation["reason"] == "Invalid"  # 422, as the CRD's refusal


def test_rules_a_policy_cannot_reach_are_refused_rather_than_dropped() -> None:
    on_map_values = {
        "properties": {
            "labels": {"additionalProperties": {"type": "string", RULES: [{"rule": "self"}]}}
        }
    }
    with pytest.raises(ValueError, match="map values"):
        admission_policy("x", "g", "v1", "xs", on_map_values)
    transition_on_items = {"items": {RULES: [{"rule": "self == oldSelf"}]}}
    with pytest.raises(ValueError, match="list items"):
        admission_policy("x", "g", "v1", "xs", {"properties": {"l": transition_on_items}})


def test_the_policy_skips_writes_that_leave_the_spec_as_it_was() -> None:
    """Without it, an object admitted under older rules could not lose its finalizer."""
    policy, _ = admission_policy("x", "g", "v1", "xs", {RULES: [{"rule": "self.a"}]})
    conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
    assert conditions == {"spec-changed": "oldObject == null || oldObject.spec != object.spec"}
    assert policy["spec"]["failurePolicy"] == "Fail"


# -- CEL cost ----------------------------------------------------------------------------------

PRESENT = {"flag", "policy"}


@pytest.mark.parametrize(
    ("rule", "lightened"),
    [
        ("(has(self.flag) && self.flag) || x", "(self.flag) || x"),
        ("!(has(oldSelf.flag) && oldSelf.flag) || self.flag", "!(oldSelf.flag) || self.flag"),
        ("!has(self.flag) || !self.flag || y", "!self.flag || y"),
        ("a && (!has(self.policy) || self.policy == 'x')", "a && (self.policy == 'x')"),
        (
            "has(self.policy) == has(oldSelf.policy) && "
            "(!has(self.policy) || self.policy == oldSelf.policy)",
            "(self.policy == oldSelf.policy)",
        ),
        # Not operands of a chain: `a == has(f) && b` is `(a == has(f)) && b`, and
        # `a && !has(f) || b` is `(a && !has(f)) || b`; folding either would change the rule.
        ("a == has(self.flag) && b", "a == has(self.flag) && b"),
        ("a && !has(self.flag) || b", "a && !has(self.flag) || b"),
        ("!has(self.flag) && b", "!has(self.flag) && b"),
        # Fields without a default keep their tests.
        ("has(self.other) && self.other", "has(self.other) && self.other"),
    ],
)
def test_presence_tests_of_defaulted_fields_fold_away_only_as_chain_operands(
    rule: str, lightened: str
) -> None:
    assert without_presence_tests(rule, PRESENT) == lightened


def test_fields_with_a_default_are_always_present_unless_nullable() -> None:
    node = {
        "properties": {
            "flag": {"type": "boolean", "default": False},
            "maybe": {"type": "string", "default": "x", "nullable": True},
            "free": {"type": "string"},
        }
    }
    assert always_present(node) == {"flag"}


def test_no_generated_rule_tests_the_presence_of_a_defaulted_field() -> None:
    """Each such test costs kube-apiserver a copy of the object's property schemas on every
    write of every resource (bench/results/diary-2026-11.md); the rule helpers write them
    everywhere, so this fails if the generator stops folding them away."""
    for kind in ALL_KINDS:
        assert needless_presence_tests(validated_spec_schema(kind)) == [], kind.kind


def test_a_rule_reading_one_always_present_field_moves_onto_it() -> None:
    node: dict[str, Any] = {
        "required": ["name"],
        "properties": {
            "name": {"type": "string"},
            "sealed": {"type": "boolean", "default": False},
            "mirror": {"type": "object", "properties": {"name": {"type": "string"}}},
            "count": {"type": "integer", "default": 0},
        },
        "x-kubernetes-validations": [
            {"rule": "self.name == oldSelf.name", "message": "name"},
            {"rule": "!(oldSelf.sealed) || (self.sealed)", "message": "sealed"},
            # Stays: an optional field (the rule must also run when it is removed), two
            # fields, a presence test, the object itself, a message expression.
            {"rule": "self.mirror == oldSelf.mirror", "message": "mirror"},
            {"rule": "self.count <= size(self.name)", "message": "two"},
            {"rule": "!has(self.count) || self.count > 0", "message": "has"},
            {"rule": "self.count == 0 || self == oldSelf", "message": "self"},
            {"rule": "self.count >= 0", "messageExpression": "'at ' + string(self.count)"},
        ],
    }
    assert only_field_read({"rule": "self.nameLonger == oldSelf.nameLonger"}) == "nameLonger"
    move_single_field_rules(node)
    kept = [r.get("message") for r in node["x-kubernetes-validations"]]
    assert kept == ["mirror", "two", "has", "self", None]
    assert node["properties"]["name"]["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "name"}
    ]
    assert node["properties"]["sealed"]["x-kubernetes-validations"] == [
        {"rule": "!(oldSelf) || (self)", "message": "sealed"}
    ]
    assert "x-kubernetes-validations" not in node["properties"]["mirror"]
    assert movable_rules(node) == []


def test_no_generated_rule_could_sit_on_the_one_field_it_reads() -> None:
    for kind in ALL_KINDS:
        assert movable_rules(validated_spec_schema(kind)) == [], kind.kind
