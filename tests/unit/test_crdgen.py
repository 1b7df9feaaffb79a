"""The CRDs are generated from the models; these tests keep them valid and committed."""

from pathlib import Path
from typing import Any

import yaml

from jetstream_operator.api.crdgen import all_crds, crd_files

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
    for text in crd_files().values():
        assert yaml.safe_load(text)["kind"] == "CustomResourceDefinition"
