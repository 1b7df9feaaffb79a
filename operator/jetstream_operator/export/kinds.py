"""Server config -> spec, one small mapping per kind behind one interface.

Each kind states only its reverse mapping (every spec field the server config determines); the
shared `minimal_spec` then drops every field whose removal leaves the forward mapping's desired
config unchanged, so the result says only what differs from our defaults, whatever those
defaults are (2m duplicate window or maxAge, 30s ack wait, 1000 max ack pending...). The same
forward mapping then checks the result: a field that cannot be expressed is reported, never
silently lost. KeyValue and ObjectStore read the same stream config as Stream does and rename
what their spec calls otherwise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import ValidationError

from ..api.base import ResourceModel
from ..api.consumer import ConsumerSpec
from ..api.keyvalue import KeyValueSpec
from ..api.objectstore import ObjectStoreSpec
from ..api.stream import StreamSpec
from ..reconcile.bucket_config import (
    KV_STREAM_PREFIX,
    OBJ_STREAM_PREFIX,
    keyvalue_stream_spec,
    kv_subjects,
    objectstore_stream_spec,
)
from ..reconcile.consumer_config import (
    DELIVER_POLICIES,
    consumer_differences,
    desired_consumer_config,
)
from ..reconcile.ownership import RECORD_KEYS, Owner
from ..reconcile.stream_config import (
    FieldDifference,
    ServerConfig,
    config_differences,
    desired_stream_config,
    newer_flags_off,
    server_chosen_fields,
)
from ..reconcile.stream_plan import following_server

SpecT = TypeVar("SpecT", bound=ResourceModel)

PROBE_OWNER = Owner("export", "export", "export")
"""Stands in for the owner in desired configs; the owner record is never part of a comparison."""
SERVER_METADATA_PREFIX = "_nats"
SERVER_TO_DELIVER_POLICY = {server: ours for ours, server in DELIVER_POLICIES.items()}


@dataclass(frozen=True)
class Exported(Generic[SpecT]):
    """One object's spec (only what differs from our defaults) and what it could not say."""

    spec: SpecT
    fields: frozenset[str]
    """The spec fields to write (Python names); the rest are our defaults."""
    unexpressed: list[FieldDifference] = field(default_factory=list)
    """Server fields our model cannot reproduce; empty when the round trip is exact."""

    def body(self) -> dict[str, Any]:
        """The spec as it goes in a manifest: camelCase, durations as Go strings."""
        dumped: dict[str, Any] = self.spec.model_dump(
            mode="json", by_alias=True, exclude_defaults=True, include=set(self.fields)
        )
        return dumped


def user_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Metadata the user wrote: without the server's `_nats.*` keys and our owner record."""
    return {
        key: value
        for key, value in (metadata or {}).items()
        if not key.startswith(SERVER_METADATA_PREFIX) and key not in RECORD_KEYS
    }


def _without_owner(config: ServerConfig) -> ServerConfig:
    metadata = {
        key: value
        for key, value in (config.get("metadata") or {}).items()
        if key not in RECORD_KEYS
    }
    return {**config, "metadata": metadata}


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    """Leave out empty values: they mean the same as absent in every model."""
    return {key: value for key, value in fields.items() if value not in (None, "", [], {})}


class KindMapping(ABC, Generic[SpecT]):
    """The reverse of one kind's forward mapping (reconcile/*_config.py)."""

    kind: ClassVar[str]
    model: type[SpecT]

    @abstractmethod
    def spec_fields(self, config: ServerConfig, context: Mapping[str, Any]) -> dict[str, Any]:
        """Every spec field (Python names) the server config determines."""

    @abstractmethod
    def desired(self, spec: SpecT, context: Mapping[str, Any]) -> ServerConfig:
        """The forward mapping: the config the operator would hold the server to."""

    @abstractmethod
    def differences(
        self, spec: SpecT, context: Mapping[str, Any], actual: ServerConfig
    ) -> list[FieldDifference]:
        """What adopting this spec would change on the server besides the owner record, as the
        operator's own comparison sees it."""

    def _validate(self, fields: Mapping[str, Any]) -> SpecT | None:
        try:
            return self.model.model_validate(dict(fields))
        except ValidationError:
            return None

    def export(
        self, config: ServerConfig, context: Mapping[str, Any] | None = None
    ) -> Exported[SpecT]:
        """The minimal spec for this server config, checked against the forward mapping."""
        context = context or {}
        fields = self.spec_fields(config, context)
        spec = self.model.model_validate(fields)
        target = self.desired(spec, context)
        for name in list(fields):
            trial = {key: value for key, value in fields.items() if key != name}
            smaller = self._validate(trial)
            if smaller is not None and self.desired(smaller, context) == target:
                fields, spec = trial, smaller
        return Exported(spec, frozenset(fields), self.differences(spec, context, config))


def _transform(transform: Mapping[str, Any] | None) -> dict[str, str] | None:
    if not transform or not transform.get("dest"):
        return None
    return {"source": transform.get("src") or ">", "dest": transform["dest"]}


def _source(source: Mapping[str, Any]) -> dict[str, Any]:
    external = source.get("external") or {}
    return _present(
        {
            "name": source["name"],
            "opt_start_seq": source.get("opt_start_seq") or None,
            "opt_start_time": source.get("opt_start_time"),
            "filter_subject": source.get("filter_subject"),
            "subject_transforms": [
                _transform(item) for item in source.get("subject_transforms") or []
            ],
            "external_api_prefix": external.get("api"),
            "external_deliver_prefix": external.get("deliver"),
        }
    )


class StreamBackedMapping(KindMapping[SpecT]):
    """A kind holding one stream, compared as the operator's stream planner compares: immutable
    fields the spec leaves out follow the server, fields the server chooses are not compared."""

    stream_prefix: ClassVar[str] = ""

    @abstractmethod
    def to_stream(self, spec: SpecT) -> StreamSpec:
        """The Stream spec the operator translates this kind's spec into."""

    def desired(self, spec: SpecT, context: Mapping[str, Any]) -> ServerConfig:
        return desired_stream_config(self.to_stream(spec), PROBE_OWNER)

    def differences(
        self, spec: SpecT, context: Mapping[str, Any], actual: ServerConfig
    ) -> list[FieldDifference]:
        stream = following_server(self.to_stream(spec), actual)
        desired = newer_flags_off(desired_stream_config(stream, PROBE_OWNER), actual)
        ignored = server_chosen_fields(stream)
        if stream.mirror is not None:
            # A mirror keeps the window it is sent, and a Stream's adopting update sends 0
            # when the spec has none: a mirror made with 2m needs duplicateWindow said.
            ignored -= {"duplicate_window"}
        return config_differences(_without_owner(desired), _without_owner(actual), ignored)


class StreamMapping(StreamBackedMapping[StreamSpec]):
    kind = "Stream"
    model = StreamSpec

    def to_stream(self, spec: StreamSpec) -> StreamSpec:
        return spec

    def spec_fields(self, config: ServerConfig, context: Mapping[str, Any]) -> dict[str, Any]:
        placement = config.get("placement") or {}
        republish = config.get("republish") or {}
        limits = config.get("consumer_limits") or {}
        persist_mode = config.get("persist_mode")
        return _present(
            {
                "name": config["name"],
                "description": config.get("description"),
                "subjects": list(config.get("subjects") or []),
                "retention": config.get("retention"),
                "storage": config.get("storage"),
                "replicas": config.get("num_replicas") or None,
                "max_consumers": config.get("max_consumers"),
                "max_msgs": config.get("max_msgs"),
                "max_bytes": config.get("max_bytes"),
                "max_age": config.get("max_age") or None,
                "max_msg_size": config.get("max_msg_size"),
                "max_msgs_per_subject": config.get("max_msgs_per_subject"),
                "discard": config.get("discard"),
                "discard_per_subject": config.get("discard_new_per_subject"),
                "duplicate_window": config.get("duplicate_window"),
                "no_ack": config.get("no_ack"),
                "placement": (
                    _present({"cluster": placement.get("cluster"), "tags": placement.get("tags")})
                    or None
                ),
                "mirror": _source(config["mirror"]) if config.get("mirror") else None,
                "sources": [_source(source) for source in config.get("sources") or []],
                "compression": config.get("compression"),
                "first_sequence": config.get("first_seq") or None,
                "subject_transform": _transform(config.get("subject_transform")),
                "republish": (
                    {
                        "source": republish.get("src") or ">",
                        "destination": republish["dest"],
                        # The camelCase key: "headers_only" is also NACK's alias of it.
                        "headersOnly": bool(republish.get("headers_only")),
                    }
                    if republish.get("dest")
                    else None
                ),
                "sealed": config.get("sealed"),
                "deny_delete": config.get("deny_delete"),
                "deny_purge": config.get("deny_purge"),
                "allow_rollup": config.get("allow_rollup_hdrs"),
                "allow_direct": config.get("allow_direct"),
                # A mirror's is copied from its origin by the server, whatever is sent.
                "mirror_direct": None if config.get("mirror") else config.get("mirror_direct"),
                "allow_msg_ttl": config.get("allow_msg_ttl"),
                "subject_delete_marker_ttl": config.get("subject_delete_marker_ttl") or None,
                "allow_msg_counter": config.get("allow_msg_counter"),
                "allow_atomic_publish": config.get("allow_atomic"),
                "allow_msg_schedules": config.get("allow_msg_schedules"),
                "persist_mode": persist_mode
                if persist_mode and persist_mode != "default"
                else None,
                "consumer_limits": _present(
                    {
                        "inactive_threshold": limits.get("inactive_threshold") or None,
                        "max_ack_pending": limits.get("max_ack_pending") or None,
                    }
                )
                or None,
                "metadata": user_metadata(config.get("metadata")),
            }
        )


class ConsumerMapping(KindMapping[ConsumerSpec]):
    """Context: `stream` (the stream's name in NATS) and `stream_limits` (its consumer_limits),
    which supply the defaults of maxAckPending and inactiveThreshold."""

    kind = "Consumer"
    model = ConsumerSpec

    def spec_fields(self, config: ServerConfig, context: Mapping[str, Any]) -> dict[str, Any]:
        pinned = config.get("priority_policy") == "pinned_client"
        push = bool(config.get("deliver_subject"))
        return _present(
            {
                "durable_name": config.get("durable_name") or config.get("name"),
                "stream_name": context["stream"],
                "description": config.get("description"),
                "deliver_policy": SERVER_TO_DELIVER_POLICY.get(config.get("deliver_policy", "")),
                "opt_start_seq": config.get("opt_start_seq") or None,
                "opt_start_time": config.get("opt_start_time"),
                "ack_policy": config.get("ack_policy"),
                "ack_wait": config.get("ack_wait"),
                "max_deliver": config.get("max_deliver"),
                "backoff": list(config.get("backoff") or []),
                "filter_subject": config.get("filter_subject"),
                "filter_subjects": list(config.get("filter_subjects") or []),
                "replay_policy": config.get("replay_policy"),
                "sample_freq": config.get("sample_freq"),
                "rate_limit_bps": config.get("rate_limit_bps") or None,
                "max_ack_pending": config.get("max_ack_pending"),
                "max_waiting": None if push else config.get("max_waiting") or None,
                "deliver_subject": config.get("deliver_subject"),
                "deliver_group": config.get("deliver_group"),
                "flow_control": config.get("flow_control"),
                "heartbeat_interval": config.get("idle_heartbeat") or None,
                "headers_only": config.get("headers_only"),
                "max_request_batch": config.get("max_batch") or None,
                "max_request_expires": config.get("max_expires") or None,
                "max_request_max_bytes": config.get("max_bytes") or None,
                "inactive_threshold": config.get("inactive_threshold") or None,
                "replicas": config.get("num_replicas") or None,
                "mem_storage": config.get("mem_storage"),
                "metadata": user_metadata(config.get("metadata")),
                "pause_until": config.get("pause_until"),
                "priority_policy": config.get("priority_policy"),
                "pinned_ttl": config.get("priority_timeout") if pinned else None,
                "priority_groups": list(config.get("priority_groups") or []),
            }
        )

    def desired(self, spec: ConsumerSpec, context: Mapping[str, Any]) -> ServerConfig:
        return desired_consumer_config(
            spec, PROBE_OWNER, context["stream"], stream_limits=context.get("stream_limits")
        )

    def differences(
        self, spec: ConsumerSpec, context: Mapping[str, Any], actual: ServerConfig
    ) -> list[FieldDifference]:
        desired = self.desired(spec, context)
        return consumer_differences(_without_owner(desired), _without_owner(actual))


def _renamed(fields: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """Stream spec fields under the names a bucket's spec gives them."""
    return {ours: fields[stream] for stream, ours in names.items() if stream in fields}


_BUCKET_FIELDS = {
    "description": "description",
    "max_age": "ttl",
    "max_bytes": "max_bytes",
    "storage": "storage",
    "replicas": "replicas",
    "placement": "placement",
    "metadata": "metadata",
}
"""Stream spec fields both bucket kinds have (the stream's max_age is their ttl)."""
_KEY_VALUE_FIELDS = {
    **_BUCKET_FIELDS,
    "max_msgs_per_subject": "history",
    "max_msg_size": "max_value_size",
    "allow_direct": "direct",
    "subject_delete_marker_ttl": "limit_marker_ttl",
}


class BucketMapping(StreamBackedMapping[SpecT]):
    """A Key-Value bucket or Object Store: its stream read as a Stream, then renamed. Whatever
    the bucket's spec cannot say (a stream made by hand under a bucket's name) shows up as a
    difference of the forward mapping, never silently."""

    fields: ClassVar[Mapping[str, str]]

    def bucket(self, config: ServerConfig) -> str:
        return str(config["name"]).removeprefix(self.stream_prefix)

    def spec_fields(self, config: ServerConfig, context: Mapping[str, Any]) -> dict[str, Any]:
        stream = STREAMS.spec_fields(config, context)
        bucket = self.bucket(config)
        return {
            **_renamed(stream, self.fields),
            **self.kind_fields(stream, bucket),
            "bucket": bucket,
            "compression": stream.get("compression") == "s2",
        }

    def kind_fields(self, stream: Mapping[str, Any], bucket: str) -> dict[str, Any]:
        """Fields this kind says differently from a Stream (none by default)."""
        return {}


class KeyValueMapping(BucketMapping[KeyValueSpec]):
    kind = "KeyValue"
    model = KeyValueSpec
    stream_prefix = KV_STREAM_PREFIX
    fields = _KEY_VALUE_FIELDS

    def to_stream(self, spec: KeyValueSpec) -> StreamSpec:
        return keyvalue_stream_spec(spec)

    def kind_fields(self, stream: Mapping[str, Any], bucket: str) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if republish := stream.get("republish"):
            fields["republish"] = republish  # ">" and $KV.<bucket>.> are different sources
        if stream.get("mirror"):
            fields["mirror"] = {**stream["mirror"], "name": _bucket_name(stream["mirror"]["name"])}
        if stream.get("sources"):
            fields["sources"] = [_kv_source(source, bucket) for source in stream["sources"]]
        return fields


def _bucket_name(stream: str) -> str:
    """A KV_ stream named by its bucket, as a spec names mirrors and sources."""
    bucket = stream.removeprefix(KV_STREAM_PREFIX)
    return bucket or stream


def _kv_source(source: Mapping[str, Any], bucket: str) -> dict[str, Any]:
    """The reverse of the clients' source rule: the subject transform they add to copy another
    bucket's keys into this one is implied by naming that bucket."""
    origin = _bucket_name(source["name"])
    implied = [{"source": kv_subjects(origin), "dest": kv_subjects(bucket)}]
    transforms = source.get("subject_transforms")
    if not source["name"].startswith(KV_STREAM_PREFIX) or transforms not in (None, implied):
        return dict(source)  # taken as written by the forward mapping
    return {key: value for key, value in source.items() if key != "subject_transforms"} | {
        "name": origin
    }


class ObjectStoreMapping(BucketMapping[ObjectStoreSpec]):
    kind = "ObjectStore"
    model = ObjectStoreSpec
    stream_prefix = OBJ_STREAM_PREFIX
    fields = _BUCKET_FIELDS

    def to_stream(self, spec: ObjectStoreSpec) -> StreamSpec:
        return objectstore_stream_spec(spec)


STREAMS = StreamMapping()
CONSUMERS = ConsumerMapping()
KEY_VALUES = KeyValueMapping()
OBJECT_STORES = ObjectStoreMapping()
BUCKETS: tuple[BucketMapping[Any], ...] = (KEY_VALUES, OBJECT_STORES)
