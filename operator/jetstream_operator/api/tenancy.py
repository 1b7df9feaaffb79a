"""Tenancy: what a connection shared by many namespaces lets each of them do in NATS. Set by
the platform team on the operator's default connection (JETSTREAM_OPERATOR_TENANCY, the
chart's `nats.tenancy`); docs/tenancy.md says what it guarantees."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, JsonValue, field_validator

from .base import ResourceModel, cel

NAMESPACE_PLACEHOLDER = "{namespace}"

Template = Annotated[str, Field(min_length=1, max_length=255)]


def _with_namespace(value: str) -> str:
    if NAMESPACE_PLACEHOLDER not in value:
        raise ValueError(
            f"{value!r} has no {NAMESPACE_PLACEHOLDER}: every namespace would get the same "
            f"names or subjects; write, for example, '{NAMESPACE_PLACEHOLDER}-' or "
            f"'{NAMESPACE_PLACEHOLDER}.'"
        )
    if any(character in value for character in " \t*>"):
        raise ValueError(f"{value!r}: no spaces or wildcards in a prefix")
    return value


class Quotas(ResourceModel):
    """Per namespace, over its resources on this connection; unset: no limit."""

    streams: Annotated[int, Field(ge=0)] | None = None
    consumers: Annotated[int, Field(ge=0)] | None = None
    key_values: Annotated[int, Field(ge=0)] | None = None
    object_stores: Annotated[int, Field(ge=0)] | None = None
    max_bytes_file: Annotated[int, Field(ge=0)] | None = None
    """spec.maxBytes summed over the namespace's file-backed streams and buckets."""
    max_bytes_memory: Annotated[int, Field(ge=0)] | None = None
    """spec.maxBytes summed over the namespace's memory-backed streams and buckets."""
    max_replicas: Annotated[int, Field(ge=1, le=5)] | None = None
    """The most replicas one stream or bucket may ask for."""


_PREFIX_OK = "{prefix}.contains('{{namespace}}') && !{prefix}.matches('[ \\t*>]')"

TENANCY_RULES: list[JsonValue] = [
    cel(
        "!has(self.namePrefix) || (" + _PREFIX_OK.format(prefix="self.namePrefix") + ")",
        "tenancy.namePrefix needs {namespace} and no spaces or wildcards, or every namespace "
        "would get the same names: write, for example, '{namespace}-'",
    ),
    cel(
        "!has(self.subjectPrefixes) || self.subjectPrefixes.all(p, "
        + _PREFIX_OK.format(prefix="p")
        + ")",
        "tenancy.subjectPrefixes: each needs {namespace} and no spaces or wildcards, or every "
        "namespace would share the subjects: write, for example, '{namespace}.'",
    ),
]
"""The validators below, at admission (a ClusterNatsConnection's `spec.tenancy`)."""


class Tenancy(ResourceModel):
    """What each namespace served by a connection may do through it."""

    model_config = ConfigDict(
        **ResourceModel.model_config,
        json_schema_extra={"x-kubernetes-validations": TENANCY_RULES},
    )

    name_prefix: Template | None = None
    """Every stream, bucket and durable consumer name of a namespace starts with this
    (`{namespace}` is replaced by the namespace's name), and so does every stream it reads
    from (a consumer's, a mirror's, a source's)."""
    subject_prefixes: Annotated[list[Template], Field(max_length=32)] = Field(default_factory=list)
    """Every subject a resource binds, republishes or transforms to, delivers to, or mirrors
    and sources by starts with one of these (`{namespace}` replaced); empty: any subject."""
    adoption: Literal["Forbidden", "Allowed"] = "Forbidden"
    """Whether spec.adoption: IfUnowned may take over a stream or consumer no resource owns."""
    quotas: Quotas = Field(default_factory=Quotas)
    """Limits per namespace."""
    require_max_bytes: bool = False
    """Refuse a stream or bucket without spec.maxBytes, so quotas on bytes mean something."""

    @field_validator("name_prefix")
    @classmethod
    def _name_prefix(cls, value: str | None) -> str | None:
        return None if value is None else _with_namespace(value)

    @field_validator("subject_prefixes")
    @classmethod
    def _subject_prefixes(cls, values: list[str]) -> list[str]:
        return [_with_namespace(value) for value in values]
