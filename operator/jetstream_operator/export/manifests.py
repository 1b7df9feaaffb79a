"""Manifests from what an account holds: names valid for Kubernetes, adoption, and output.

Pure: the account is read elsewhere (export/account.py) and handed in as stream and consumer
infos, so the whole assembly is unit-tested without a server.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import API_VERSION
from ..reconcile.ownership import recorded_owner
from .kinds import CONSUMERS, STREAMS, Exported, KindMapping

MAX_NAME = 253
SKIPPED_PREFIXES = {"KV_": "a KeyValue bucket", "OBJ_": "an ObjectStore"}
"""Streams that back kinds this operator does not have yet; skipped until it does."""


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


def _unexpressed_note(mapping: KindMapping[Any], label: str, exported: Exported[Any]) -> list[str]:
    if not exported.unexpressed:
        return []
    fields = ", ".join(difference.describe() for difference in exported.unexpressed)
    return [f"{mapping.kind} {label}: not reproduced exactly, adopting would change {fields}"]


def _skip_reason(config: Mapping[str, Any]) -> str | None:
    name = str(config.get("name", ""))
    for prefix, what in SKIPPED_PREFIXES.items():
        if name.startswith(prefix):
            return f"is {what}; that kind is not supported yet"
    owner = recorded_owner(dict(config))
    if owner is not None:
        return f"is already managed by {owner.describe()}"
    return None


def export_account(
    streams: Iterable[StreamWithConsumers],
    namespace: str | None = None,
    connection_ref: str | None = None,
) -> ExportResult:
    """Stream and Consumer manifests adopting what the account holds, streams first."""
    result = ExportResult()
    stream_names, consumer_names = NameBook(), NameBook()
    consumer_manifests: list[dict[str, Any]] = []
    for item in sorted(streams, key=lambda entry: str(entry.info["config"]["name"])):
        config = dict(item.info["config"])
        stream = str(config["name"])
        reason = _skip_reason(config)
        if reason:
            result.notes.append(f"skipped stream {stream}: it {reason}")
            continue
        exported = STREAMS.export(config)
        result.notes += _unexpressed_note(STREAMS, stream, exported)
        stream_ref = stream_names.claim(stream, stream)
        result.manifests.append(
            manifest("Stream", stream_ref, _adopting(exported, connection_ref), namespace)
        )
        context = {"stream": stream, "stream_limits": config.get("consumer_limits")}
        for info in sorted(item.consumers, key=lambda entry: str(entry.get("name", ""))):
            consumer_config = dict(info["config"])
            consumer = str(info.get("name") or consumer_config.get("name", ""))
            label = f"{stream}/{consumer}"
            if not consumer_config.get("durable_name"):
                result.notes.append(f"skipped consumer {label}: it is ephemeral (not durable)")
                continue
            if (owner := recorded_owner(consumer_config)) is not None:
                result.notes.append(
                    f"skipped consumer {label}: it is already managed by {owner.describe()}"
                )
                continue
            exported_consumer = CONSUMERS.export(consumer_config, context)
            result.notes += _unexpressed_note(CONSUMERS, label, exported_consumer)
            body = _adopting(exported_consumer, connection_ref)
            body.pop("streamName", None)
            body["streamRef"] = stream_ref
            name = consumer_names.claim(f"{stream_ref}-{consumer}", label)
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
