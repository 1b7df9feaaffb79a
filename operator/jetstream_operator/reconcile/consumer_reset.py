"""Moving a consumer's position without losing data: the reset annotation, and the kept position
of a consumer the operator had to recreate. Pure: the caller does the I/O.

A server with the consumer reset API (JetStream API level 4, nats-server 2.14) moves the position
in place. Elsewhere (and where the API refuses, e.g. below a configured start) the consumer is
recreated with `deliver_policy: by_start_sequence` at the asked sequence. Such a consumer carries
two metadata keys: the sequence it starts at, and the spec's own start fields it stands in for.
While the spec's start fields stay those, the plan reads the consumer's start position as in sync
(`kept_position`); a new deliverPolicy, optStartSeq or optStartTime in the spec is a change of
position as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import GROUP
from .ownership import START_FOR_KEY, START_SEQUENCE_KEY
from .purge import pending_token
from .stream_config import ServerConfig

RESET_ANNOTATION = f"{GROUP}/reset"
RESET_TO_ANNOTATION = f"{GROUP}/reset-to"
RESET_API_LEVEL = 4
"""JetStream API level of the servers with $JS.API.CONSUMER.RESET (nats-server 2.14)."""
START_FIELDS = ("deliver_policy", "opt_start_seq", "opt_start_time")


class InvalidReset(ValueError):
    """The reset annotations cannot be understood; nothing is reset for `token`."""

    def __init__(self, token: str, message: str) -> None:
        super().__init__(message)
        self.token = token


@dataclass(frozen=True)
class ResetRequest:
    """Where to move the consumer: a stream sequence, the first message at or after a time,
    or (neither) just after its ack floor, which delivers again what was never acknowledged."""

    token: str
    sequence: int | None = None
    time: datetime | None = None

    def describe(self) -> str:
        if self.sequence is not None:
            return f"stream sequence {self.sequence}"
        if self.time is not None:
            return f"the first message at or after {self.time.isoformat()}"
        return "just after its ack floor"


def pending_reset(annotations: Mapping[str, str], status: Mapping[str, Any]) -> ResetRequest | None:
    """The reset asked for and not yet done, if any."""
    token = pending_token(annotations, status, RESET_ANNOTATION, "lastReset")
    if token is None:
        return None
    target = (annotations.get(RESET_TO_ANNOTATION) or "").strip()
    if not target or target == "ackFloor":
        return ResetRequest(token)
    if target.isdigit() and int(target) > 0:
        return ResetRequest(token, sequence=int(target))
    try:
        moment = datetime.fromisoformat(target.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidReset(
            token,
            f"{RESET_TO_ANNOTATION} must be a stream sequence (1 or more), a time in RFC 3339 "
            f"with its offset (2026-12-07T10:00:00Z), or ackFloor; not {target!r}",
        )
    return ResetRequest(token, time=moment)


def sequence_after_ack_floor(info: Mapping[str, Any]) -> int:
    """The first stream sequence the consumer has not acknowledged. With nothing awaiting an
    ack that is the one after the last delivered: a consumer that has acknowledged nothing yet
    may show an ack floor of 0 (nats-server 2.12 after a start by sequence)."""
    acked = int((info.get("ack_floor") or {}).get("stream_seq") or 0)
    if not info.get("num_ack_pending"):
        acked = max(acked, int((info.get("delivered") or {}).get("stream_seq") or 0))
    return acked + 1


def start_for(config: Mapping[str, Any]) -> str:
    """The start fields of a desired config, as recorded in START_FOR_KEY."""
    return ";".join(str(config.get(key) or "") for key in START_FIELDS)


def positioned_config(desired: ServerConfig, sequence: int) -> ServerConfig:
    """The desired config, starting at `sequence` in place of the spec's start fields."""
    metadata = {
        **(desired.get("metadata") or {}),
        START_SEQUENCE_KEY: str(sequence),
        START_FOR_KEY: start_for(desired),
    }
    return {
        **desired,
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": sequence,
        "opt_start_time": None,
        "metadata": metadata,
    }


def kept_position(desired: ServerConfig, actual: Mapping[str, Any]) -> ServerConfig:
    """What to compare the server's consumer with: the desired config at the position the
    operator recreated it at, while the spec's start fields are those it stood in for."""
    metadata = actual.get("metadata") or {}
    sequence = str(metadata.get(START_SEQUENCE_KEY) or "")
    if not sequence.isdigit() or metadata.get(START_FOR_KEY) != start_for(desired):
        return desired
    return positioned_config(desired, int(sequence))
