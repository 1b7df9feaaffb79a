"""Manifests from what an account holds: names valid for Kubernetes, adoption, and output.

Pure: the account is read elsewhere (export/account.py) and handed in as stream and consumer
infos, so the whole assembly is unit-tested without a server.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .. import API_VERSION
from ..reconcile.ownership import recorded_owner
from .kinds import BUCKETS, CONSUMERS, STREAMS, Exported, KindMapping, StreamBackedMapping

MAX_NAME = 253


def kubernetes_name(text: str) -> str:
    """A lower-case RFC 1123 name from a NATS name: other characters become '-'."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    name = re.sub(r"-{2,}", "-", name).strip("-")
    return name[:MAX_NAME].rstrip("-") or "x"


@dataclass
class NameBook:
    """Hands out unique metadata.names of one kind; a clash gets a short hash of the NATS name."""

    used: set[str] = field(default_factory=set)

    def claim(self, wanted: str, nats_name: str) -> str:
        name = kubernetes_name(wanted)
        if name in self.used:
            digest = hashlib.sha256(nats_name.encode()).hexdigest()[:8]
            name = f"{name[: MAX_NAME - 9].rstrip('-')}-{digest}"
        counter = 2
        base = name
        while name in self.used:
            name = f"{base[: MAX_NAME - 4]}-{counter}"
            counter += 1
        self.used.add(name)
        return name


@dataclass(frozen=True)
class StreamWithConsumers:
    """One stream's info (`config`, `state`...) and its consumers' infos, as the API returns."""

    info: Mapping[str, Any]
    consumers: Sequence[Mapping[str, Any]] = ()


@dataclass
class ExportResult:
    manifests: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """One line per object skipped or not reproduced exactly, for stderr."""


def manifest(
    kind: str,
    name: str,
    spec: Mapping[str, Any],
    namespace: str | None = None,
    extra_metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata.update(extra_metadata or {})
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": dict(spec)}


def _adopting(exported: Exported[Any], connection_ref: str | None) -> dict[str, Any]:
    body = exported.body()
    body["adoption"] = "IfUnowned"
    if connection_ref:
        body["connectionRef"] = connection_ref
    return body


def _changes(exported: Exported[Any]) -> str:
    return "adopting would change " + ", ".join(
        difference.describe() for difference in exported.unexpressed
    )


def _unexpressed_note(mapping: KindMapping[Any], label: str, exported: Exported[Any]) -> list[str]:
    if not exported.unexpressed:
        return []
    return [f"{mapping.kind} {label}: not reproduced exactly, {_changes(exported)}"]


def _owned_note(what: str, label: str, config: Mapping[str, Any]) -> list[str]:
    owner = recorded_owner(dict(config))
    if owner is None:
        return []
    return [f"skipped {what} {label}: it is already managed by {owner.describe()}"]


def _invalid(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(map(str, item['loc'])) or 'spec'}: {item['msg']}" for item in error.errors()
    )


@dataclass(frozen=True)
class StreamExport:
    """One stream as the kind that describes it exactly."""

    mapping: StreamBackedMapping[Any]
    exported: Exported[Any]
    name: str
    """The name the resource is named after: the bucket, or the stream."""
    notes: list[str] = field(default_factory=list)


def export_stream(config: Mapping[str, Any]) -> StreamExport:
    """A `KV_`/`OBJ_` stream as its bucket kind when that kind reproduces it exactly; otherwise
    (a stream made by hand under a bucket's name, or a value the bucket kind cannot say) as a
    Stream, with a note saying why, so nothing is lost or changed by adopting it."""
    stream = str(config["name"])
    for mapping in BUCKETS:
        if not stream.startswith(mapping.stream_prefix):
            continue
        try:
            exported = mapping.export(dict(config))
        except ValidationError as error:
            why = _invalid(error)
        else:
            if not exported.unexpressed:
                return StreamExport(mapping, exported, exported.spec.bucket)
            why = _changes(exported)
        note = f"stream {stream} exported as a Stream, not as a {mapping.kind}: {why}"
        return StreamExport(STREAMS, STREAMS.export(dict(config)), stream, [note])
    return StreamExport(STREAMS, STREAMS.export(dict(config)), stream)


def export_account(
    streams: Iterable[StreamWithConsumers],
    namespace: str | None = None,
    connection_ref: str | None = None,
) -> ExportResult:
    """Manifests adopting what the account holds: Streams, KeyValues and ObjectStores in the
    order of their streams' names, then Consumers. A Consumer names a Stream resource by
    streamRef, a bucket's stream by streamName (no Stream resource holds it)."""
    result = ExportResult()
    names: dict[str, NameBook] = defaultdict(NameBook)
    consumer_manifests: list[dict[str, Any]] = []
    for item in sorted(streams, key=lambda entry: str(entry.info["config"]["name"])):
        config = dict(item.info["config"])
        stream = str(config["name"])
        if skipped := _owned_note("stream", stream, config):
            result.notes += skipped
            continue
        chosen = export_stream(config)
        kind = chosen.mapping.kind
        result.notes += chosen.notes + _unexpressed_note(chosen.mapping, stream, chosen.exported)
        resource = names[kind].claim(chosen.name, stream)
        result.manifests.append(
            manifest(kind, resource, _adopting(chosen.exported, connection_ref), namespace)
        )
        context = {"stream": stream, "stream_limits": config.get("consumer_limits")}
        for info in sorted(item.consumers, key=lambda entry: str(entry.get("name", ""))):
            consumer_config = dict(info["config"])
            consumer = str(info.get("name") or consumer_config.get("name", ""))
            label = f"{stream}/{consumer}"
            if not consumer_config.get("durable_name"):
                result.notes.append(f"skipped consumer {label}: it is ephemeral (not durable)")
                continue
            if skipped := _owned_note("consumer", label, consumer_config):
                result.notes += skipped
                continue
            exported_consumer = CONSUMERS.export(consumer_config, context)
            result.notes += _unexpressed_note(CONSUMERS, label, exported_consumer)
            body = _adopting(exported_consumer, connection_ref)
            body.pop("streamName", None)
            if kind == STREAMS.kind:
                body["streamRef"] = resource
            else:
                body["streamName"] = stream
            name = names["Consumer"].claim(f"{resource}-{consumer}", label)
            consumer_manifests.append(manifest("Consumer", name, body, namespace))
    result.manifests += consumer_manifests
    return result


def to_yaml(manifests: Iterable[Mapping[str, Any]]) -> str:
    """One YAML stream, `---` between documents, keys in the order written."""
    return "---\n".join(
        yaml.safe_dump(dict(item), sort_keys=False, allow_unicode=True) for item in manifests
    )


def write_files(manifests: Iterable[Mapping[str, Any]], directory: Path) -> list[Path]:
    """One file per object, `<kind>-<name>.yaml`, ready for `kubectl apply -f DIR` or Git."""
    directory.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for item in manifests:
        path = directory / f"{str(item['kind']).lower()}-{item['metadata']['name']}.yaml"
        path.write_text(to_yaml([item]))
        paths.append(path)
    return paths
