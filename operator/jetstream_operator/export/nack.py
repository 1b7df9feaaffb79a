"""NACK `jetstream.nats.io` manifests -> ours, with NACK's defaults explicit.

Our field names are NACK's, but some defaults are not: NACK's CRD defaults `storage: memory`,
consumer `ackPolicy: none` and `ackWait: 1ns`, so a NACK manifest that leaves them out made
objects with those values. Writing them out lets the converted resource adopt (`adoption:
IfUnowned`) what NACK made without asking the server for any change beyond the owner record.
Values NACK writes for "unset" ('' strings, 0 limits) are dropped. A KeyValue or ObjectStore
left without storage was made with file storage (nats.go's zero value), as ours would be.
An Account becomes a NatsConnection reading the same Secrets, and `spec.account` a
connectionRef to it; NACK's per-resource connection fields (servers, creds, tls...) are
reported: they become a NatsConnection by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..api.base import ResourceModel, format_duration
from ..api.connection import NatsConnectionSpec
from ..api.consumer import ConsumerSpec
from ..api.keyvalue import KeyValueSpec
from ..api.objectstore import ObjectStoreSpec
from ..api.stream import StreamSpec
from ..marks import CONNECTION_SECRET_LABEL
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
NACK_CONNECTION_FIELDS = ("servers", "creds", "nkey", "tls", "tlsFirst", "jsDomain")
NOT_CONVERTIBLE = ("StreamTemplate",)
KEPT_ANNOTATION_PREFIXES = ("kubectl.kubernetes.io/",)


@dataclass(frozen=True)
class NackKind:
    """How one NACK kind converts into ours (same kind name, same field names)."""

    model: type[ResourceModel]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """NACK's defaults that differ from ours, written out when the manifest leaves them out."""
    zero_means_unset: frozenset[str] = frozenset()
    """Fields where NACK (nats.go) takes 0 as "use the default"."""
    nanoseconds: frozenset[str] = frozenset()
    """Integer nanoseconds in NACK, a duration string here."""


KINDS: Mapping[str, NackKind] = {
    "Stream": NackKind(
        StreamSpec, NACK_STREAM_DEFAULTS, frozenset({"maxMsgsPerSubject", "firstSequence"})
    ),
    "Consumer": NackKind(ConsumerSpec, NACK_CONSUMER_DEFAULTS),
    # No storage default in NACK's CRDs for buckets: nats.go's zero value is file storage, ours
    # too. History, sizes and replicas 0 are nats.go's defaults (1, -1, 1), ours as well.
    "KeyValue": NackKind(
        KeyValueSpec,
        zero_means_unset=frozenset(
            {"history", "maxValueSize", "maxBytes", "replicas", "limitMarkerTtl"}
        ),
        nanoseconds=frozenset({"limitMarkerTtl"}),
    ),
    "ObjectStore": NackKind(ObjectStoreSpec, zero_means_unset=frozenset({"maxBytes", "replicas"})),
}
CONVERTIBLE = (*KINDS, "Account")


class NotConvertible(ValueError):
    """A NACK object with no faithful counterpart here; the message says what to do instead."""


@dataclass
class Conversion:
    manifests: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What was made explicit or left out, one line per object, for stderr."""
    refused: list[str] = field(default_factory=list)
    """Objects not converted (kinds without a counterpart, invalid specs)."""


def _unset(value: Any) -> bool:
    """NACK's CRD writes '' and 0 for fields left out; neither means anything set."""
    return value is None or value == "" or value == [] or value == {}


def _validated(model: type[ResourceModel], spec: Mapping[str, Any]) -> None:
    try:
        model.model_validate(dict(spec))
    except ValidationError as error:
        raise ValueError(str(error)) from None


def convert_spec(kind: str, spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Our spec for a NACK spec, and notes on what changed; raises ValueError if invalid."""
    nack = KINDS[kind]
    notes: list[str] = []
    converted: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "account" and not _unset(value):
            converted["connectionRef"] = value
            notes.append(
                f"spec.account {value} became connectionRef: {value} (the NatsConnection "
                "converted from NACK's Account)"
            )
            continue
        if key in NACK_CONNECTION_FIELDS or key == "account":
            if not _unset(value) and value is not False:
                notes.append(
                    f"spec.{key} left out: describe the connection with a NatsConnection and "
                    "set spec.connectionRef"
                )
            continue
        if _unset(value) or (key in nack.zero_means_unset and value == 0):
            continue
        if key in nack.nanoseconds and isinstance(value, int):
            value = format_duration(value)
        converted[key] = value
    for key, value in nack.defaults.items():
        if key not in converted:
            converted[key] = value
            notes.append(
                f"spec.{key}: {value} written out (NACK's default){DEFAULT_HINTS.get(key, '')}"
            )
    converted["adoption"] = "IfUnowned"
    _validated(nack.model, converted)
    return converted, notes


ACCOUNT_AUTH: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "creds": ("creds", {"key": "file"}),
    "nkey": ("nkey", {"key": "seed"}),
    "token": ("token", {"key": "token"}),
    "user": ("userPassword", {"usernameKey": "user", "passwordKey": "password"}),
}
"""NACK Account auth -> NatsConnection field and its Secret keys (ours <- NACK's): both read
the value under the key the resource names, from a Secret of the same namespace."""


def _secret(ref: Mapping[str, Any] | None, what: str) -> str:
    """The Secret a NACK Account reads something from; files in NACK's pod do not move."""
    name = ((ref or {}).get("secret") or {}).get("name")
    if not name:
        raise NotConvertible(
            f"spec.{what} names files mounted in NACK's controller, not a Secret: put them in a "
            "Secret and write the NatsConnection by hand"
        )
    return str(name)


def convert_account(spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A NatsConnection for a NACK Account: the same servers, reading the same Secrets under the
    same keys. Raises NotConvertible when NACK's behaviour cannot be reproduced."""
    if not spec.get("servers"):
        raise NotConvertible(
            "no spec.servers: NACK used its controller's --server URL, which a manifest does not "
            "show; write the NatsConnection's servers by hand"
        )
    converted: dict[str, Any] = {"servers": list(spec["servers"])}
    notes: list[str] = []
    if tls := spec.get("tls"):
        cert, key = tls.get("cert"), tls.get("key")
        if bool(cert) != bool(key):
            notes.append("spec.tls: a client cert without its key (or back), unused by NACK too")
        converted["tls"] = {
            "secretName": _secret(tls, "tls"),
            # "": NACK verified with the system's CAs; unlike null, no apply turns it into ca.crt
            "caKey": tls.get("ca") or "",
            **({"certKey": cert, "keyKey": key} if cert and key else {}),
        }
    if spec.get("tlsFirst"):
        converted["tlsFirst"] = True
    chosen = [name for name in ACCOUNT_AUTH if spec.get(name)]
    if len(chosen) > 1:
        raise NotConvertible(f"it combines {', '.join(chosen)}; a NatsConnection uses one")
    for name in chosen:
        ours, keys = ACCOUNT_AUTH[name]
        ref = spec[name]
        converted[ours] = {"secretName": _secret(ref, name)} | {
            our_key: ref[nack_key] for our_key, nack_key in keys.items() if ref.get(nack_key)
        }
    encrypted = ("tls://", "wss://", *(("nats://",) if converted.get("tlsFirst") else ()))
    plaintext = not all(str(url).startswith(encrypted) for url in converted["servers"])
    if chosen and plaintext and "tls" not in converted:
        converted["allowPlaintext"] = True
        notes.append(
            "spec.allowPlaintext: NACK sent these credentials unencrypted to nats:// or ws:// "
            "servers, and so will the operator until the URLs are tls:// and this is removed"
        )
    secrets = sorted(
        {str(value["secretName"]) for value in converted.values() if isinstance(value, dict)}
    )
    if secrets:
        notes.append(
            f"reads Secret {', '.join(secrets)} under the same keys as NACK did; the operator "
            f"needs get on it, and uses it only once labelled {CONNECTION_SECRET_LABEL}=true "
            "(docs/connections.md)"
        )
    _validated(NatsConnectionSpec, converted)
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
    """Convert every NACK resource among the documents (kubectl `List`s included)."""
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
        if kind not in CONVERTIBLE:
            why = "not convertible" if kind in NOT_CONVERTIBLE else "unknown kind"
            result.refused.append(f"{label}: {why} (only {', '.join(CONVERTIBLE)} are)")
            continue
        try:
            if kind == "Account":
                kind = "NatsConnection"
                spec, notes = convert_account(document.get("spec") or {})
            else:
                spec, notes = convert_spec(kind, document.get("spec") or {})
        except NotConvertible as error:
            result.refused.append(f"{label}: {error}")
            continue
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
