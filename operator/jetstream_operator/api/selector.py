"""A Kubernetes label selector, as a field of our kinds and as the operator's settings read it,
with the matching Kubernetes does: every matchLabels pair and every expression must hold."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, JsonValue

from .base import ResourceModel, cel

LabelKey = Annotated[str, Field(min_length=1, max_length=317)]
LabelValue = Annotated[str, Field(max_length=63)]


class LabelSelectorRequirement(ResourceModel):
    """One expression: the label `key` In or NotIn `values`, or whether it Exists."""

    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: Annotated[list[LabelValue], Field(max_length=64)] = Field(default_factory=list)
    """Non-empty for In and NotIn, empty for Exists and DoesNotExist."""


SELECTOR_RULES: list[JsonValue] = [
    cel(
        "!has(self.matchExpressions) || self.matchExpressions.all(r, "
        "(r.operator == 'In' || r.operator == 'NotIn') == (has(r.values) && size(r.values) > 0))",
        "matchExpressions: In and NotIn need values; Exists and DoesNotExist take none",
    ),
]


class LabelSelector(ResourceModel):
    """Namespaces by their labels; `{}` selects every namespace."""

    model_config = ConfigDict(
        **ResourceModel.model_config,
        json_schema_extra={"x-kubernetes-validations": SELECTOR_RULES},
    )

    match_labels: Annotated[dict[LabelKey, LabelValue], Field(max_length=64)] = Field(
        default_factory=dict
    )
    """Labels every selected namespace carries with these values."""
    match_expressions: Annotated[list[LabelSelectorRequirement], Field(max_length=64)] = Field(
        default_factory=list
    )
    """Expressions every selected namespace satisfies."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(key) != value for key, value in self.match_labels.items()):
            return False
        return all(_holds(requirement, labels) for requirement in self.match_expressions)

    def describe(self) -> str:
        """kubectl's way of writing it, for messages: `team=a,tier in (x,y)`."""
        parts = [f"{key}={value}" for key, value in sorted(self.match_labels.items())]
        for requirement in self.match_expressions:
            key, values = requirement.key, ",".join(requirement.values)
            parts.append(
                {
                    "In": f"{key} in ({values})",
                    "NotIn": f"{key} notin ({values})",
                    "Exists": key,
                    "DoesNotExist": f"!{key}",
                }[requirement.operator]
            )
        return ",".join(parts) or "(every namespace)"


def _holds(requirement: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = requirement.key in labels
    if requirement.operator == "Exists":
        return present
    if requirement.operator == "DoesNotExist":
        return not present
    inside = present and labels[requirement.key] in requirement.values
    return inside if requirement.operator == "In" else not inside
