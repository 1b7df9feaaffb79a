"""Which streams' consumers a resync lists.

Advisories report consumer changes as they happen, so a listing (a request per stream) is spent
only where they cannot help; this module keeps the marks and the rotations that decide where.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any


def stream_mark(info: Mapping[str, Any]) -> tuple[Any, ...]:
    """What changes in a stream's listing when its consumers may have changed."""
    state = info.get("state") or {}
    return (
        info.get("created"),
        state.get("first_seq"),
        state.get("last_seq"),
        state.get("messages"),
        state.get("consumer_count"),
    )


def consumer_activity(consumer: Mapping[str, Any]) -> tuple[Any, ...]:
    """What moves in a consumer's listing when clients read or acknowledge, even if its stream
    gets no new messages (a backlog being drained)."""
    delivered = consumer.get("delivered") or {}
    ack_floor = consumer.get("ack_floor") or {}
    return (
        delivered.get("stream_seq"),
        ack_floor.get("stream_seq"),
        consumer.get("num_pending"),
        consumer.get("num_ack_pending"),
        consumer.get("num_redelivered"),
    )


def has_work(consumer: Mapping[str, Any]) -> bool:
    return bool(consumer.get("num_pending") or consumer.get("num_ack_pending"))


class _Rotation:
    """A cursor over a changing set of streams that lists `share` of them per pass; fractions
    carry over, so a small set is not listed on every pass."""

    def __init__(self, share: float) -> None:
        self.share = min(1.0, max(0.0, share))
        self._cursor = 0
        self._credit = 0.0

    def take(self, members: list[str]) -> list[str]:
        if not members:
            return []
        self._credit += len(members) * self.share
        count = min(len(members), math.floor(self._credit))
        self._credit -= count
        start = self._cursor % len(members)
        self._cursor = start + count
        return (members + members)[start : start + count]


class ConsumerSweep:
    """Chooses the streams whose consumers a resync lists.

    Advisories and the API audit report every change to a consumer as it happens, so listing is
    needed only where they cannot help: for streams whose state moved (new messages, a consumer
    added or removed: pending figures changed), for every stream after advisories may have been
    lost, for consumers that clients are reading without new messages (a backlog being drained:
    `share`, every consumer resync interval), and, as the guard against an advisory lost without
    a reconnect, for the idle rest at the much smaller `idle_share`. Idle consumers therefore
    cost a listing per stream per idle interval, not per consumer resync interval.
    """

    def __init__(self, share: float, idle_share: float | None = None) -> None:
        self._active_rotation = _Rotation(share)
        self._idle_rotation = _Rotation(share if idle_share is None else idle_share)
        self._marks: dict[str, tuple[Any, ...]] = {}
        self._activity: dict[str, dict[str, tuple[Any, ...]]] = {}
        self._active: set[str] = set()
        self._everything = True

    def everything_next(self) -> None:
        """Advisories may have been lost: list every stream's consumers on the next pass."""
        self._everything = True

    def looked(self, stream: str, consumers: Mapping[str, Mapping[str, Any]]) -> None:
        """Record a listing of the stream's consumers: a stream stays active while a consumer's
        figures move between looks, or when one first seen has work outstanding."""
        before = self._activity.get(stream)
        now = {name: consumer_activity(info) for name, info in consumers.items()}
        moving = any(
            (before is not None and name in before and before[name] != mark)
            or ((before is None or name not in before) and has_work(consumers[name]))
            for name, mark in now.items()
        )
        self._activity[stream] = now
        if moving:
            self._active.add(stream)
        else:
            self._active.discard(stream)

    def behind(self, stream: str) -> None:
        """A consumer's status is behind the figures this look found (its write was held back by
        the status budget): keep the stream active, so it is looked at again until written."""
        self._active.add(stream)

    def choose(
        self,
        infos: Mapping[str, Mapping[str, Any]],
        streams: Iterable[str],
        always: Iterable[str] = (),
    ) -> set[str]:
        """The streams to list now; `always` on every pass (consumers with metrics of their
        own, whose lag must stay fresh), whatever the rotations say."""
        ordered = sorted(set(streams))
        if self._everything:
            self._everything = False
            chosen = set(ordered)
        else:
            # A stream seen for the first time had its consumers made or checked by their
            # handlers just now: it is only marked (and counted active if it holds messages a
            # consumer may be reading). Afterwards, a changed mark means a look.
            chosen = {
                name
                for name in ordered
                if name in self._marks and stream_mark(infos[name]) != self._marks[name]
            }
            for name in ordered:
                if name not in self._marks:
                    self._marks[name] = stream_mark(infos[name])
                    if (infos[name].get("state") or {}).get("messages"):
                        self._active.add(name)
            chosen.update(self._active_rotation.take([n for n in ordered if n in self._active]))
            chosen.update(self._idle_rotation.take([n for n in ordered if n not in self._active]))
        chosen.update(name for name in always if name in infos and name in ordered)
        for name in chosen:
            self._marks[name] = stream_mark(infos[name])
        for gone in set(self._marks) - set(ordered):
            del self._marks[gone]
            self._activity.pop(gone, None)
            self._active.discard(gone)
        return chosen
