"""A handler's own creations are not looked into again when their advisories come back, and
nothing else is taken for one of them."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from jetstream_operator.handlers.failures import FailureMemory
from jetstream_operator.handlers.own_writes import ECHO_WINDOW, OwnWrites
from jetstream_operator.handlers.registry import ResourceRegistry
from jetstream_operator.nats.jsapi import JetStreamApi, JetStreamError

from .fakes import Clock
from .test_handler_glue import RecordingWriter, stream_body, watcher


def test_each_noted_write_is_matched_with_one_advisory() -> None:
    notes = OwnWrites()
    notes.expect("S", "C")
    assert notes.is_echo("S", "C", "CREATED")
    assert not notes.is_echo("S", "C", "CREATED")  # a second creation is someone else's
    assert not notes.is_echo("S", None, "CREATED")  # the stream was not noted


def test_a_deletion_is_never_an_echo_and_forgets_the_note() -> None:
    notes = OwnWrites()
    notes.expect("S", None)
    assert not notes.is_echo("S", None, "DELETED")
    assert not notes.is_echo("S", None, "CREATED")  # created again after it: not ours
    assert len(notes) == 0


def test_a_note_expires_and_a_failed_write_is_cancelled() -> None:
    clock = Clock()
    notes = OwnWrites(clock)
    notes.expect("S", "C")
    notes.expect("T", None)
    notes.cancel("T", None)
    assert not notes.is_echo("T", None, "CREATED")
    clock.now += ECHO_WINDOW + 1
    assert not notes.is_echo("S", "C", "CREATED")
    notes.expect("U", None)  # noting drops what expired
    assert len(notes) == 1


class Connection:
    """Answers every request with `answer`, recording what the notes held when it was sent."""

    def __init__(self, notes: OwnWrites, answer: dict[str, Any]) -> None:
        self.notes = notes
        self.answer = answer
        self.noted_when_sent: list[int] = []

    async def request(self, subject: str, payload: bytes, timeout: float) -> Any:
        self.noted_when_sent.append(len(self.notes))
        return SimpleNamespace(data=json.dumps(self.answer).encode())


async def test_creations_and_stream_updates_are_noted_before_they_are_sent() -> None:
    notes = OwnWrites()
    connection = Connection(notes, {})
    plain = JetStreamApi(connection)  # type: ignore[arg-type]
    api = plain.noting_writes(notes)
    await api.create_stream({"name": "S"})
    await api.update_stream({"name": "S"})
    await api.create_consumer("S", {"config": {"name": "C"}, "action": "create"})
    await api.create_consumer("S", {"config": {"name": "C"}, "action": "update"})
    await plain.create_stream({"name": "T"})  # the API it was made from notes nothing
    assert connection.noted_when_sent == [1, 2, 3, 3, 3]
    assert notes.is_echo("S", None, "CREATED") and notes.is_echo("S", None, "UPDATED")
    assert notes.is_echo("S", "C", "CREATED")
    assert not notes.is_echo("T", None, "CREATED")


async def test_a_refused_write_leaves_no_note() -> None:
    notes = OwnWrites()
    refusal = {"error": {"code": 400, "err_code": 10058, "description": "stream name in use"}}
    api = JetStreamApi(Connection(notes, refusal)).noting_writes(notes)  # type: ignore[arg-type]
    with pytest.raises(JetStreamError):
        await api.create_stream({"name": "S"})
    assert len(notes) == 0


async def test_the_echo_of_a_consumer_a_handler_made_costs_no_look_and_no_recount() -> None:
    streams = ResourceRegistry()
    streams.observe("ADDED", stream_body("s", "uid-s", {"name": "S"}))
    drift = watcher(streams, RecordingWriter(), FailureMemory())
    drift.own_writes.expect("S", "C")
    drift.own_writes.expect("S", None)
    await drift.notify_stream("S", "CREATED")
    await drift.notify_consumer("S", "C", "CREATED")
    assert not drift._pending_streams and not drift._pending_consumers
    assert not drift._recount
    # Someone else's deletion of either is looked into, and the stream recounted.
    await drift.notify_consumer("S", "C", "DELETED")
    await drift.notify_stream("S", "DELETED")
    assert drift._pending_consumers == {("S", "C")} and drift._pending_streams == {"S"}
    assert drift._recount == {"S"}
