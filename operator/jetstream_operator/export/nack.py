"""NACK `jetstream.nats.io` Stream and Consumer manifests -> ours, with NACK's defaults explicit.

Our field names are NACK's, but some defaults are not: NACK's CRD defaults `storage: memory`,
consumer `ackPolicy: none` and `ackWait: 1ns`, so a NACK manifest that leaves them out made
objects with those values. Writing them out lets the converted resource adopt (`adoption:
IfUnowned`) what NACK made without asking the server for any change beyond the owner record.
Values NACK writes for "unset" ('' strings, 0 limits) are dropped, and NACK's per-resource
connection fields (servers, creds, tls...) are reported: they become a NatsConnection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..api.base import ResourceModel
from ..api.consumer import ConsumerSpec
from ..api.stream import StreamSpec
from .manifests import manifest

NACK_GROUP = "jetstream.nats.io"
NACK_STREAM_DEFAULTS: Mapping[str, Any] = {"storage": "memory"}
"""NACK's CRD defaults that differ from ours (the rest, such as retention limits, replicas 1,
discard old, -1 limits, are ours too)."""
NACK_CONSUMER_DEFAULTS: Mapping[str, Any] = {"ackPolicy": "none", "ackWait": "1ns"}
"""ackWait 1ns redelivers at once when acks are on; kept because it is what NACK made: change it
afterwards on purpose (ackWait is mutable)."""
DEFAULT_HINTS: Mapping[str, str] = {
    "ackWait": "; with acks on it redelivers at once: once adopted, set the wait you mean "
    "(e.g. 30s), an in-place update",
    "storage": "; the stream keeps it (storage cannot change)",
}
NACK_CONNECTION_FIELDS = ("servers", "creds", "nkey", "tls", "tlsFirst", "account", "jsDomain")
NOT_CONVERTIBLE = ("KeyValue", "ObjectStore", "Account", "StreamTemplate")
KEPT_ANNOTATION_PREFIXES = ("kubectl.kubernetes.io/",)
MODELS: Mapping[str, tuple[type[ResourceModel], Mapping[str, Any]]] = {
    "Stream": (StreamSpec, NACK_STREAM_DEFAULTS),
    "Consumer": (ConsumerSpec, NACK_CONSUMER_DEFAULTS),
}


@dataclass
class Conversion:
    manifests: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What was made explicit or left out, one line per object, for stderr."""
    refused: list[str] = field(default_factory=list)
    """Objects not converted (kinds without a counterpart yet, invalid specs)."""


def _unset(value: Any) -> bool:
    """NACK's CRD writes '' and 0 for fields left out; neither means anything set."""
    return value is None or value == "" or value == [] or value == {}


def _zero_means_unset(key: str, value: Any) -> bool:
    return key in ("maxMsgsPerSubject", "firstSequence") and value == 0


def convert_spec(kind: str, spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Our spec for a NACK spec, and notes on what changed; raises ValueError if invalid."""
    model, defaults = MODELS[kind]
    notes: list[str] = []
    converted: dict[str, Any] = {}
    for key, value in spec.items():
        if key in NACK_CONNECTION_FIELDS:
            if not _unset(value) and value is not False:
                notes.append(
                    f"spec.{key} left out: describe the connection with a NatsConnection and "
                    "set spec.connectionRef"
                )
            continue
        if key == "compression" and value == "":
            continue
        if _unset(value) or _zero_means_unset(key, value):
            continue
        converted[key] = value
    for key, value in defaults.items():
        if key not in converted:
            converted[key] = value
            notes.append(
                f"spec.{key}: {value} written out (NACK's default){DEFAULT_HINTS.get(key, '')}"
            )
    converted["adoption"] = "IfUnowned"
    try:
        model.model_validate(converted)
    except ValidationError as error:
        raise ValueError(str(error)) from None
    return converted, notes


def _metadata(source: Mapping[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if source.get("labels"):
        extra["labels"] = dict(source["labels"])
    annotations = {
        key: value
        for key, value in (source.get("annotations") or {}).items()
        if not key.startswith(KEPT_ANNOTATION_PREFIXES)
    }
    if annotations:
        extra["annotations"] = annotations
    return extra


def convert_documents(documents: Iterable[Mapping[str, Any] | None]) -> Conversion:
    """Convert every NACK Stream and Consumer among the documents (kubectl `List`s included)."""
    result = Conversion()
    for document in documents:
        if not document:
            continue
        if document.get("kind") == "List":
            nested = convert_documents(document.get("items") or [])
            result.manifests += nested.manifests
            result.notes += nested.notes
            result.refused += nested.refused
            continue
        api_version = str(document.get("apiVersion", ""))
        kind = str(document.get("kind", ""))
        metadata = document.get("metadata") or {}
        label = f"{kind} {metadata.get('namespace', '')}/{metadata.get('name', '?')}".replace(
            " /", " "
        )
        if not api_version.startswith(f"{NACK_GROUP}/"):
            result.notes.append(f"ignored {label}: not a NACK resource ({api_version})")
            continue
        if kind not in MODELS:
            why = "not convertible yet" if kind in NOT_CONVERTIBLE else "unknown kind"
            result.refused.append(f"{label}: {why} (only Stream and Consumer are)")
            continue
        try:
            spec, notes = convert_spec(kind, document.get("spec") or {})
        except ValueError as error:
            result.refused.append(f"{label}: its spec is not valid here: {error}")
            continue
        result.notes += [f"{label}: {note}" for note in notes]
        result.manifests.append(
            manifest(kind, metadata["name"], spec, metadata.get("namespace"), _metadata(metadata))
        )
    return result


def read_documents(source: str) -> list[Any]:
    """YAML documents from a file, every *.yaml/*.yml/*.json under a directory, or '-' (stdin)."""
    import sys

    if source == "-":
        return list(yaml.safe_load_all(sys.stdin))
    path = Path(source)
    files = (
        sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
        if path.is_dir()
        else [path]
    )
    documents: list[Any] = []
    for file in files:
        documents += list(yaml.safe_load_all(file.read_text()))
    return documents
