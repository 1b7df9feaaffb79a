"""How a failing resource behaves: one Warning per distinct failure, retries with jittered
exponential backoff, and never the same update twice for the same server state.

Shared by kopf's handlers and drift repair, so a stalled resource costs nothing between its
retries whichever path looks at it. A retry waits for its time unless what it depends on changed:
the spec (generation) or the server's object (its config).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .results import Result

Basis = tuple[int | None, str]
"""What a failure depended on: the resource's generation and a digest of the server's object."""
NO_BASIS: Basis = (None, "")
"""For failures that depend on nothing the operator can see (NATS unreachable, deletion)."""


def digest(value: Any) -> str:
    """A stable fingerprint of a server config (or None), for comparing observed states."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


@dataclass
class _Failure:
    signature: tuple[str, str]
    basis: Basis
    attempts: int
    retry_at: float
    result: Result
    transient: bool


@dataclass
class FailureMemory:
    """Failures and recent updates by resource uid; the clock and jitter are injectable."""

    base_delay: float = 2.0
    max_delay: float = 300.0
    transient_max_delay: float = 30.0
    clock: Callable[[], float] = time.monotonic
    jitter: Callable[[], float] = random.random
    _failures: dict[str, _Failure] = field(default_factory=dict)
    _sent: dict[str, tuple[str, str]] = field(default_factory=dict)
    _queue: list[tuple[float, str]] = field(default_factory=list)

    def delay(self, attempts: int, *, transient: bool) -> float:
        """Exponential in the attempts, capped, and jittered into [half, full] so that many
        resources failing together do not retry together."""
        cap = self.transient_max_delay if transient else self.max_delay
        full = min(cap, self.base_delay * 2.0 ** max(0, attempts - 1))
        return full * (0.5 + 0.5 * self.jitter())

    def held(self, uid: str, basis: Basis) -> Result | None:
        """The remembered outcome while a stalled failure waits out its backoff, else None.

        Transient failures are never held: they are retried whenever a pass can run."""
        failure = self._failures.get(uid)
        if failure is None or failure.transient or failure.basis != basis:
            return None
        if self.clock() >= failure.retry_at:
            self._sent.pop(uid, None)  # the retry may send what it sent before, once
            return None
        return Result(failure.result.outcome)

    def repeats(self, uid: str, observed: Any, request: Any) -> bool:
        """Whether this update was already sent for this very server state; records it if not.

        A server that keeps its own value for a field answers every update the same way, and
        each update raises an advisory that starts the next repair: this breaks that loop."""
        sent = (digest(observed), digest(request))
        if self._sent.get(uid) == sent:
            return True
        self._sent[uid] = sent
        return False

    def settle(
        self, uid: str, basis: Basis, result: Result, shown: Mapping[str, Any] | None = None
    ) -> Result:
        """Record a pass's result; returns it with repeated Warnings left out and the delay set.

        `shown` is the Ready condition the resource shows now, so a Warning already explained
        there (before a restart, say) is not posted again."""
        if result.outcome.ready:
            self.forget(uid)
            return result
        transient = not result.outcome.stalled
        if transient:
            self._sent.pop(uid, None)  # what it sent may never have reached the server
        signature = (result.outcome.reason, result.outcome.message)
        previous = self._failures.get(uid)
        if previous is not None and previous.signature == signature:
            attempts = previous.attempts + 1 if previous.basis == basis else 1
            repeated = True
        else:
            attempts = 1
            repeated = shown is not None and (
                shown.get("status") == "False"
                and (shown.get("reason"), shown.get("message")) == signature
            )
        wait = self.delay(attempts, transient=transient)
        retry_at = self.clock() + wait
        self._failures[uid] = _Failure(signature, basis, attempts, retry_at, result, transient)
        heapq.heappush(self._queue, (retry_at, uid))
        events = [e for e in result.events if e.type != "Warning"] if repeated else result.events
        return replace(result, events=events, delay=wait)

    def forget(self, uid: str) -> None:
        self._failures.pop(uid, None)
        self._sent.pop(uid, None)

    def next_due(self) -> float | None:
        """When the earliest retry is due (on this memory's clock), or None."""
        while self._queue:
            retry_at, uid = self._queue[0]
            failure = self._failures.get(uid)
            if failure is not None and failure.retry_at == retry_at:
                return retry_at
            heapq.heappop(self._queue)  # superseded or forgotten
        return None

    def due(self) -> list[str]:
        """Uids whose retry time has come, each given once."""
        now, found = self.clock(), []
        while (when := self.next_due()) is not None and when <= now:
            found.append(heapq.heappop(self._queue)[1])
        return found

    def failing(self, uid: str) -> bool:
        return uid in self._failures

    def retry_in(self, uid: str) -> float | None:
        """Seconds until the resource's retry is due (0 when overdue), or None: not failing."""
        failure = self._failures.get(uid)
        return None if failure is None else max(0.0, failure.retry_at - self.clock())

    def __len__(self) -> int:
        return len(self._failures)


class FailureMemories:
    """One failure memory per NATS connection, so each drift watcher retries only its own
    resources and wakes only for them."""

    def __init__(self, make: Callable[[], FailureMemory]) -> None:
        self._make = make
        self._memories: dict[Any, FailureMemory] = {}

    def for_connection(self, key: Any) -> FailureMemory:
        memory = self._memories.get(key)
        if memory is None:
            memory = self._memories[key] = self._make()
        return memory

    def forget(self, uid: str) -> None:
        for memory in self._memories.values():
            memory.forget(uid)


def failure_basis(generation: int | None, server_object: Any) -> Basis:
    return (generation, digest(server_object))


@dataclass(frozen=True)
class History:
    """What a pass needs from earlier ones: the resource's generation and shown status, and
    the failure memory."""

    generation: int | None
    status: Mapping[str, Any]
    memory: FailureMemory

    def ready_condition(self) -> Mapping[str, Any] | None:
        for condition in self.status.get("conditions") or []:
            if condition.get("type") == "Ready":
                found: Mapping[str, Any] = condition
                return found
        return None


def creates_unlooked(history: History | None, known: object, read_only: bool) -> bool:
    """Whether a pass creates its stream or consumer without looking for it first: a first
    pass (no condition reported yet), with nothing known of the object from a listing. Its
    object is most likely not made yet, so this saves a look, and the server refuses the
    create if it is there after all."""
    first_pass = history is not None and not history.status.get("conditions")
    return first_pass and known is None and not read_only
