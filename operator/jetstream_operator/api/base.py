"""Shared building blocks of the resource models.

Field names are camelCase on the wire (as in NACK's manifests) and snake_case in Python; unknown
fields are rejected so a typo fails loudly instead of being ignored.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    JsonValue,
    PlainSerializer,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel


class ResourceModel(BaseModel):
    """Base for every spec and status model."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        use_attribute_docstrings=True,
        frozen=True,
    )


_UNIT_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
GO_DURATION_PATTERN = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$"
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> int:
    """Parse a Go duration string ("1h30m", "100ms") into nanoseconds, as the server stores it."""
    value = text.strip()
    if value == "0":
        return 0
    if not re.fullmatch(GO_DURATION_PATTERN, value):
        raise ValueError(f"{text!r} is not a duration such as '90s', '24h' or '1h30m'")
    total = Decimal(0)
    for number, unit in _PART.findall(value):
        total += Decimal(number) * _UNIT_NS[unit]
    return int(total)


def format_duration(nanos: int) -> str:
    """Render nanoseconds in the largest whole units, so status and events read naturally."""
    if nanos == 0:
        return "0s"
    parts: list[str] = []
    remaining = nanos
    for unit in ("h", "m", "s", "ms", "us", "ns"):
        size = _UNIT_NS[unit]
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _duration_input(value: Any) -> Any:
    if isinstance(value, str):
        return parse_duration(value)
    return value


Duration = Annotated[
    int,
    BeforeValidator(_duration_input),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": GO_DURATION_PATTERN}),
]
"""A Go duration string on the wire ("24h"), nanoseconds in Python and on the server."""


NO_CRD_DEFAULT = "x-jetstream-operator-no-default"
"""Schema marker: the CRD states no default for this field, so the API server leaves it unset."""


def left_unset_in_crd() -> dict[str, JsonValue]:
    """For fields whose absence means something: an immutable field left out follows the
    object that exists in NATS (one adopted from NACK) instead of the operator's default."""
    return {NO_CRD_DEFAULT: True}


def cel(rule: str, message: str) -> JsonValue:
    """A CEL validation rule, written as for `x-kubernetes-validations` on its schema node; the
    API server checks it in the kind's admission policy (policygen.py)."""
    return {"rule": rule, "message": message}


def cel_on(field: str) -> str:
    """CEL: a boolean field present and true (absent reads as false)."""
    return f"(has(self.{field}) && self.{field})"


def cel_is(field: str, value: str) -> str:
    """CEL: a string field present with this value."""
    return f"(has(self.{field}) && self.{field} == '{value}')"
