"""Turn a Stream spec into the server's stream config, and compare it with what the server has.

The resource describes the whole stream: every field the operator manages is sent on each update,
so a field removed from the spec returns to its default on the server instead of lingering.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..api.stream import StreamSource, StreamSpec, SubjectTransform
from .ownership import OWNER_FIELD, OWNER_METADATA_KEY, Owner

ServerConfig = dict[str, Any]

# Metadata keys the server itself maintains (`_nats.*`); never part of the desired state.
_SERVER_METADATA_PREFIX = "_nats"
# Fields the server takes only when a stream is created; later differences are not drift.
CREATE_ONLY_FIELDS = frozenset({"first_seq"})

DEFAULT_DUPLICATE_WINDOW_NS = 120_000_000_000


def _limit(value: int) -> int:
    """The server stores 0 as -1 (no limit); saying -1 keeps the comparison honest."""
    return -1 if value == 0 else value


def default_duplicate_window(max_age_ns: int) -> int:
    """The window the server picks when none is given: 2m, or maxAge when that is shorter.

    Stating it explicitly lets a removed duplicateWindow return to the default like any field.
    """
    if 0 < max_age_ns < DEFAULT_DUPLICATE_WINDOW_NS:
        return max_age_ns
    return DEFAULT_DUPLICATE_WINDOW_NS


def go_time(moment: datetime) -> str:
    """RFC 3339 in UTC, as the server renders times, so equal instants compare equal."""
    utc = moment.astimezone(UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def _transform(transform: SubjectTransform) -> dict[str, str]:
    return {"src": transform.source, "dest": transform.dest}


def _source(source: StreamSource) -> dict[str, Any]:
    config: dict[str, Any] = {"name": source.name}
    if source.opt_start_seq:
        config["opt_start_seq"] = source.opt_start_seq
    if source.opt_start_time is not None:
        config["opt_start_time"] = go_time(source.opt_start_time)
    if source.filter_subject:
        config["filter_subject"] = source.filter_subject
    if source.subject_transforms:
        config["subject_transforms"] = [_transform(t) for t in source.subject_transforms]
    if source.consumer is not None:
        config["consumer"] = {
            "name": source.consumer.name,
            "deliver_subject": source.consumer.deliver_subject,
        }
    if source.external_api_prefix or source.external_deliver_prefix:
        config["external"] = {
            "api": source.external_api_prefix or "",
            "deliver": source.external_deliver_prefix or "",
        }
    return config


def copies_streams(spec: StreamSpec) -> bool:
    """A mirror or a stream with sources: the server picks some of its settings itself."""
    return spec.mirror is not None or bool(spec.sources)


def server_chosen_fields(spec: StreamSpec) -> frozenset[str]:
    """Fields whose value the server decides from outside the spec, so they are not compared.

    - duplicate_window of a mirror or sourcing stream left unset: the server keeps 0 for a
      mirror and for sources picks 2m (2.12) or 0 (2.14); both are its defaults, not drift.
    - mirror_direct of a mirror: the server copies the origin's allow_direct whatever is sent.
    """
    chosen: set[str] = set()
    if copies_streams(spec) and not spec.duplicate_window:
        chosen.add("duplicate_window")
    if spec.mirror is not None:
        chosen.add("mirror_direct")
    return frozenset(chosen)


def _duplicate_window(spec: StreamSpec) -> int:
    """The window to send. Unset on a mirror or sourcing stream, 0 lets the server choose
    (server_chosen_fields), except that 2.12 would then pick 2m and, pedantic, refuse it as
    longer than a maxAge under 2m: maxAge is what it would settle on, so that is sent."""
    if spec.duplicate_window:  # "0", like unset, is the server's default
        return spec.duplicate_window
    max_age = spec.max_age or 0
    if spec.mirror is not None:
        return 0
    if spec.sources:
        return max_age if max_age < DEFAULT_DUPLICATE_WINDOW_NS else 0
    return default_duplicate_window(max_age)


def _sealed_shape(config: ServerConfig) -> ServerConfig:
    """What the server stores when it seals a stream (configUpdateCheck): no age limit,
    discard new, deletes and purges denied, no rollups. Sealing is one-way, so this shape is
    the desired state from then on."""
    return {
        **config,
        "max_age": 0,
        "discard": "new",
        "deny_delete": True,
        "deny_purge": True,
        "allow_rollup_hdrs": False,
    }


def desired_stream_config(spec: StreamSpec, owner: Owner) -> ServerConfig:
    """The complete config the server should hold for this spec (JetStream API JSON), with the
    server's own rewrites applied (docs/server-rewrites.md) so a stream in sync shows no
    difference."""
    if spec.sealed:
        return _sealed_shape(_open_stream_config(spec, owner))
    return _open_stream_config(spec, owner)


def _open_stream_config(spec: StreamSpec, owner: Owner) -> ServerConfig:
    captures_own_name = not copies_streams(spec)
    config: ServerConfig = {
        "name": spec.name,
        "description": spec.description or "",
        # With no subjects the server captures the stream's own name; saying so avoids a
        # difference that would never settle.
        "subjects": list(spec.subjects) or ([spec.name] if captures_own_name else []),
        "retention": spec.retention,
        "storage": spec.storage,
        "num_replicas": spec.replicas,
        "max_consumers": _limit(spec.max_consumers),
        "max_msgs": _limit(spec.max_msgs),
        "max_bytes": _limit(spec.max_bytes),
        "max_age": spec.max_age or 0,
        "max_msg_size": _limit(spec.max_msg_size),
        "max_msgs_per_subject": _limit(spec.max_msgs_per_subject),
        "discard": spec.discard,
        "discard_new_per_subject": spec.discard_per_subject,
        "duplicate_window": _duplicate_window(spec),
        "no_ack": spec.no_ack,
        "placement": (
            {"cluster": spec.placement.cluster or "", "tags": list(spec.placement.tags)}
            if spec.placement
            else None
        ),
        "mirror": _source(spec.mirror) if spec.mirror else None,
        "sources": [_source(source) for source in spec.sources],
        "compression": spec.compression,
        "subject_transform": (
            _transform(spec.subject_transform) if spec.subject_transform else None
        ),
        "republish": (
            {
                "src": spec.republish.source,
                "dest": spec.republish.destination,
                "headers_only": spec.republish.only_headers(),
            }
            if spec.republish
            else None
        ),
        "sealed": spec.sealed,
        "deny_delete": spec.deny_delete,
        "deny_purge": spec.deny_purge,
        # Message schedules need rollups: the server turns them on (checkStreamCfg).
        "allow_rollup_hdrs": spec.allow_rollup or spec.allow_msg_schedules,
        "allow_direct": spec.allow_direct,
        "mirror_direct": spec.mirror_direct,
        "allow_msg_ttl": spec.allow_msg_ttl,
        "subject_delete_marker_ttl": spec.subject_delete_marker_ttl or 0,
        "allow_msg_counter": spec.allow_msg_counter,
        "allow_atomic": spec.allow_atomic_publish,
        "allow_msg_schedules": spec.allow_msg_schedules,
        "consumer_limits": (
            {
                "inactive_threshold": spec.consumer_limits.inactive_threshold or 0,
                "max_ack_pending": spec.consumer_limits.max_ack_pending or 0,
            }
            if spec.consumer_limits
            else {}
        ),
        "metadata": {**spec.metadata, OWNER_METADATA_KEY: owner.encode()},
    }
    if spec.allow_batch_publish:
        config["allow_batched"] = True  # 2.14+: sent only when asked for, see newer_flags_off
    if spec.persist_mode is not None:
        config["persist_mode"] = spec.persist_mode
    if spec.first_sequence:
        config["first_seq"] = spec.first_sequence
    return config


NEWER_FLAGS = ("allow_batched",)
"""Flags older servers do not know (they refuse unknown fields): sent only when on, or when
the server has them on and the spec wants them off."""


def newer_flags_off(desired: ServerConfig, actual: ServerConfig) -> ServerConfig:
    """The desired config, with newer flags the server has on and the spec left off stated as
    off, so turning one off is a difference like any other."""
    return desired | {
        flag: False for flag in NEWER_FLAGS if actual.get(flag) and flag not in desired
    }


def without_create_only(config: ServerConfig, actual: ServerConfig | None = None) -> ServerConfig:
    """An update request: the server refuses create-only fields that differ, so they carry the
    server's own values; left out, the server would drop them (a stream's first_seq)."""
    request = {key: value for key, value in config.items() if key not in CREATE_ONLY_FIELDS}
    for key in CREATE_ONLY_FIELDS:
        if (actual or {}).get(key):
            request[key] = (actual or {})[key]
    return request


@dataclass(frozen=True)
class FieldDifference:
    """One server field whose value differs from the desired one."""

    field: str
    desired: Any
    actual: Any

    def describe(self) -> str:
        return f"{self.field}: {self.actual!r} -> {self.desired!r}"


def _prune(value: Any) -> Any:
    """Drop empty values at every depth: the server leaves out false, "", 0, [] and {}."""
    if isinstance(value, dict):
        pruned = {key: _prune(item) for key, item in value.items()}
        return {
            key: item for key, item in pruned.items() if item not in (None, False, "", 0, [], {})
        }
    if isinstance(value, list):
        return [_prune(item) for item in value]
    return value


def without_server_metadata(config: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A stream's or consumer's config from the server without the metadata the server keeps
    itself: an INFO shows `_nats.ver` and `_nats.level` where a listing does not, so what
    stands for the server's state (a failure's basis, an update already sent) leaves them out.
    Otherwise each resync's listing would read as a change on the server, and a refused update
    would be retried at once instead of after its backoff."""
    if not config or not isinstance(config.get("metadata"), Mapping):
        return config
    return {**config, "metadata": _user_metadata(config["metadata"])}


def _user_metadata(value: Any) -> dict[str, str]:
    return {
        key: val
        for key, val in (value or {}).items()
        if not key.startswith(_SERVER_METADATA_PREFIX)
    }


def config_differences(
    desired: ServerConfig, actual: ServerConfig, ignore: frozenset[str] = frozenset()
) -> list[FieldDifference]:
    """Fields where the server's config departs from the desired one; empty when in sync.
    `ignore` names fields the server chooses itself (server_chosen_fields)."""
    differences: list[FieldDifference] = []
    for key in sorted(set(desired) - CREATE_ONLY_FIELDS - ignore):
        want, have = desired[key], actual.get(key)
        if key == "metadata":
            want, have = _user_metadata(want), _user_metadata(have)
        if key == "persist_mode" and not have:
            have = "default"
        if _prune({key: want}) != _prune({key: have}):
            differences.append(FieldDifference(key, want, have))
    return differences


def owner_difference(owner: Owner, recorded: Owner | None) -> list[FieldDifference]:
    """The owner record as a difference to repair when the resource re-attaches under a new UID.

    Metadata comparisons leave the owner key out, so without this a restored resource would
    never renew the record."""
    if recorded is None or not owner.reattaching(recorded):
        return []
    return [FieldDifference(OWNER_FIELD, owner.encode(), recorded.encode())]
