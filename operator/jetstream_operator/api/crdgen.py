"""Generate CustomResourceDefinitions, and the admission policies holding their rules, from the
pydantic models.

The API server accepts only structural schemas (no `$ref`, no `type: null`, no `properties` next
to `additionalProperties`), so pydantic's JSON schema is rewritten here rather than hand-kept.
The models' CEL rules go into a ValidatingAdmissionPolicy per kind, not into the CRD (see
policygen.py for why).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from .base import NO_CRD_DEFAULT
from .celcost import lighten_rules
from .kinds import ALL_KINDS, ResourceKind
from .policygen import admission_policy, without_rules

JsonSchema = dict[str, Any]

_DROPPED_KEYS = {"title", "$defs", "discriminator", "propertyNames"}


def structural_schema(model_schema: JsonSchema) -> JsonSchema:
    """Rewrite a pydantic JSON schema into a Kubernetes structural schema."""
    definitions: dict[str, JsonSchema] = model_schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, list):
            return [resolve(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return resolve(merged)
        any_of = node.get("anyOf")
        if any_of is not None:
            options = [option for option in any_of if option != {"type": "null"}]
            if len(options) == 1:
                rest = {k: v for k, v in node.items() if k != "anyOf"}
                if rest.get("default", ...) is None:
                    rest.pop("default")
                return resolve({**options[0], **rest})
        result: JsonSchema = {}
        for key, value in node.items():
            if key in _DROPPED_KEYS:
                continue
            if key == "properties":
                result[key] = {name: resolve(sub) for name, sub in value.items()}
            elif key == "additionalProperties" and value is False:
                continue
            elif key == "const":
                result["enum"] = [value]
            elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
                result["minimum" if key == "exclusiveMinimum" else "maximum"] = value
                result[key] = True
            else:
                result[key] = resolve(value)
        if result.get("default", ...) is None or result.pop(NO_CRD_DEFAULT, False):
            result.pop("default", None)
        return result

    schema = resolve({k: v for k, v in model_schema.items() if k != "$defs"})
    assert isinstance(schema, dict)
    return schema


def _model_schema(model: Any) -> JsonSchema:
    return structural_schema(model.model_json_schema(by_alias=True, mode="validation"))


def validated_spec_schema(kind: ResourceKind) -> JsonSchema:
    """The spec schema of one kind with its CEL rules, as the models state them."""
    return lighten_rules(_model_schema(kind.spec_model))


def policy_for(kind: ResourceKind) -> list[JsonSchema]:
    """The ValidatingAdmissionPolicy holding one kind's rules, and its binding."""
    return admission_policy(
        kind.crd_name,
        kind.group,
        kind.version,
        kind.plural,
        validated_spec_schema(kind),
        kind.request_checks,
    )


def crd_for(kind: ResourceKind) -> JsonSchema:
    """The CustomResourceDefinition of one kind: its schema, without the rules."""
    spec_schema = without_rules(validated_spec_schema(kind))
    status_schema = _model_schema(kind.status_model)
    status_schema["description"] = "Observed state, written only by the operator."
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": kind.crd_name,
            "labels": {"app.kubernetes.io/part-of": "jetstream-operator"},
        },
        "spec": {
            "group": kind.group,
            "scope": kind.scope,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": list(kind.short_names),
                "categories": list(kind.categories),
            },
            "versions": [
                {
                    "name": kind.version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {
                            "name": column.name,
                            "type": column.type,
                            "jsonPath": column.json_path,
                            **({"priority": column.priority} if column.priority else {}),
                            **({"description": column.description} if column.description else {}),
                        }
                        for column in kind.columns
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": kind.description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def all_crds() -> list[JsonSchema]:
    """Every CRD the operator needs, in a stable order."""
    return [crd_for(kind) for kind in ALL_KINDS]


def all_policies() -> list[JsonSchema]:
    """Every admission policy and binding the CRDs need, in a stable order."""
    return [item for kind in ALL_KINDS for item in policy_for(kind)]


POLICY_SUFFIX = ".policy.yaml"
"""File names of the policies in `crds/`: `<crd name>.policy.yaml`, beside `<crd name>.yaml`."""


def render(*objects: JsonSchema) -> str:
    """YAML text of one file, with a header saying where it comes from."""
    header = "# Generated from the pydantic models by `jetstream-operator crds`; do not edit.\n"
    return header + "---\n".join(
        yaml.safe_dump(item, sort_keys=False, allow_unicode=True, width=100) for item in objects
    )


def crd_files() -> dict[str, str]:
    """File name -> content, as committed in `crds/` and used by the Helm chart: each kind's
    CRD, and its policy with the binding."""
    files = {}
    for kind in ALL_KINDS:
        files[f"{kind.crd_name}.yaml"] = render(crd_for(kind))
        files[f"{kind.crd_name}{POLICY_SUFFIX}"] = render(*policy_for(kind))
    return files


def write_crds(directory: Path) -> list[Path]:
    """Write every CRD into a directory, replacing stale files of ours."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in crd_files().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
