"""Key-Value buckets and Object Stores as the streams they are built on.

A bucket is a stream with conventions (nats.go's prepareKeyValueConfig and
prepareObjectStoreConfig): translating the bucket's spec into a Stream spec lets one planner,
one drift repair and one ownership rule serve every kind.
"""

from __future__ import annotations

from typing import Any

from ..api.keyvalue import KeyValueSpec
from ..api.objectstore import ObjectStoreSpec
from ..api.stream import StreamSource, StreamSpec, SubjectTransform
from .stream_config import default_duplicate_window

KV_STREAM_PREFIX = "KV_"
OBJ_STREAM_PREFIX = "OBJ_"


def kv_subjects(bucket: str) -> str:
    return f"$KV.{bucket}.>"


def obj_subjects(bucket: str) -> list[str]:
    return [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"]


def _lifecycle(spec: KeyValueSpec | ObjectStoreSpec) -> dict[str, Any]:
    """The resource-level fields, carried over as the spec set them."""
    fields = (
        "deletion_policy",
        "prevent_delete",
        "prevent_update",
        "adoption",
        "connection_ref",
        "shared_with",
    )
    return {field: getattr(spec, field) for field in fields if field in spec.model_fields_set}


def _kv_stream_name(name: str) -> str:
    return name if name.startswith(KV_STREAM_PREFIX) else KV_STREAM_PREFIX + name


def _kv_source(source: StreamSource, bucket: str) -> StreamSource:
    """A source bucket as its stream, its keys renamed into this bucket (nats.go's rule): a
    source with subject transforms of its own is taken as written."""
    if source.subject_transforms:
        return source
    origin = source.name.removeprefix(KV_STREAM_PREFIX)
    update: dict[str, Any] = {"name": _kv_stream_name(source.name)}
    external = source.external_api_prefix or source.external_deliver_prefix
    if not external or origin != bucket:
        update["subject_transforms"] = [
            SubjectTransform(source=kv_subjects(origin), dest=kv_subjects(bucket))
        ]
    return source.model_copy(update=update)


def keyvalue_stream_spec(spec: KeyValueSpec) -> StreamSpec:
    """The stream a Key-Value bucket is: history is max messages per subject, deletes go
    through rollups, and writes are refused rather than old values dropped when full."""
    bucket = spec.bucket
    fields: dict[str, Any] = {
        "name": KV_STREAM_PREFIX + bucket,
        "description": spec.description,
        "max_msgs_per_subject": spec.history,
        "max_bytes": spec.max_bytes,
        "max_age": spec.ttl,
        # Stated, as the clients state it, for mirrors and sources too: left to the server, a
        # mirror gets none and sources 2m or 0 depending on its version.
        "duplicate_window": default_duplicate_window(spec.ttl or 0),
        "max_msg_size": spec.max_value_size,
        "replicas": spec.replicas,
        "placement": spec.placement,
        "allow_rollup": True,
        "deny_delete": True,
        "discard": "new",
        "allow_direct": spec.direct,
        "compression": "s2" if spec.compression else "none",
        "metadata": spec.metadata,
        **_lifecycle(spec),
    }
    if "storage" in spec.model_fields_set:
        fields["storage"] = spec.storage  # left out, it follows an adopted bucket
    if spec.limit_marker_ttl:
        fields["allow_msg_ttl"] = True
        fields["subject_delete_marker_ttl"] = spec.limit_marker_ttl
    if spec.republish is not None:
        # As written: ">" is what the clients and NACK store when no source is given, and it
        # is not $KV.<bucket>.> in disguise (a destination's ">" takes what the source's
        # matched, so ">" republishes to <dest>.$KV.<bucket>.<key>).
        fields["republish"] = spec.republish
    if spec.mirror is not None:
        fields["mirror"] = spec.mirror.model_copy(
            update={"name": _kv_stream_name(spec.mirror.name)}
        )
        fields["mirror_direct"] = True
    else:
        fields["subjects"] = [kv_subjects(bucket)]
        fields["sources"] = [_kv_source(source, bucket) for source in spec.sources]
    return StreamSpec.model_validate(fields)


def objectstore_stream_spec(spec: ObjectStoreSpec) -> StreamSpec:
    """The stream an Object Store is: chunk and metadata subjects, rollups for replacing an
    object's metadata, and writes refused rather than old chunks dropped when full."""
    bucket = spec.bucket
    fields: dict[str, Any] = {
        "name": OBJ_STREAM_PREFIX + bucket,
        "description": spec.description,
        "subjects": obj_subjects(bucket),
        "max_age": spec.ttl,
        "max_bytes": spec.max_bytes,
        "replicas": spec.replicas,
        "placement": spec.placement,
        "discard": "new",
        "allow_rollup": True,
        "allow_direct": True,
        "compression": "s2" if spec.compression else "none",
        "metadata": spec.metadata,
        **_lifecycle(spec),
    }
    if "storage" in spec.model_fields_set:
        fields["storage"] = spec.storage
    return StreamSpec.model_validate(fields)
