"""Turn a Stream spec into the server's stream config, and compare it with what the server has.

The resource describes the whole stream: every field the operator manages is sent on each update,
so a field removed from the spec returns to its default on the server instead of lingering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api.stream import StreamSpec
from .ownership import OWNER_METADATA_KEY, Owner

ServerConfig = dict[str, Any]

# Metadata keys the server itself maintains (`_nats.*`); never part of the desired state.
_SERVER_METADATA_PREFIX = "_nats"


def desired_stream_config(spec: StreamSpec, owner: Owner) -> ServerConfig:
    """The complete config the server should hold for this spec (JetStream API JSON)."""
    config: ServerConfig = {
        "name": spec.name,
        # With no subjects the server captures the stream's own name; saying so avoids a
        # difference that would never settle.
        "subjects": list(spec.subjects) or [spec.name],
        "retention": spec.retention,
        "storage": spec.storage,
        "num_replicas": spec.replicas,
        "max_consumers": _limit(spec.max_consumers),
        "max_msgs": _limit(spec.max_msgs),
        "max_bytes": _limit(spec.max_bytes),
        "max_age": spec.max_age,
        "max_msg_size": _limit(spec.max_msg_size),
        "max_msgs_per_subject": _limit(spec.max_msgs_per_subject),
        "discard": spec.discard,
        "no_ack": spec.no_ack,
        "metadata": {OWNER_METADATA_KEY: owner.encode()},
    }
    if spec.description is not None:
        config["description"] = spec.description
    config["duplicate_window"] = (
        spec.duplicate_window
        if spec.duplicate_window is not None
        else default_duplicate_window(spec.max_age)
    )
    return config


def _limit(value: int) -> int:
    """The server stores 0 as -1 (no limit); saying -1 keeps the comparison honest."""
    return -1 if value == 0 else value


DEFAULT_DUPLICATE_WINDOW_NS = 120_000_000_000


def default_duplicate_window(max_age_ns: int) -> int:
    """The window the server picks when none is given: 2m, or maxAge when that is shorter.

    Stating it explicitly lets a removed duplicateWindow return to the default like any field.
    """
    if 0 < max_age_ns < DEFAULT_DUPLICATE_WINDOW_NS:
        return max_age_ns
    return DEFAULT_DUPLICATE_WINDOW_NS


@dataclass(frozen=True)
class FieldDifference:
    """One server field whose value differs from the desired one."""

    field: str
    desired: Any
    actual: Any

    def describe(self) -> str:
        return f"{self.field}: {self.actual!r} -> {self.desired!r}"


def _normalize_metadata(value: Any) -> dict[str, str]:
    return {
        key: val
        for key, val in (value or {}).items()
        if not key.startswith(_SERVER_METADATA_PREFIX)
    }


def config_differences(desired: ServerConfig, actual: ServerConfig) -> list[FieldDifference]:
    """Fields where the server's config departs from the desired one; empty when in sync.

    The server leaves out empty values (false, "", [], {}), so any two empty values are equal.
    """
    differences: list[FieldDifference] = []
    for key in sorted(desired):
        want = desired[key]
        have = actual.get(key)
        if key == "metadata":
            want, have = _normalize_metadata(want), _normalize_metadata(have)
        if not want and not have:
            continue
        if want != have:
            differences.append(FieldDifference(key, want, have))
    return differences
