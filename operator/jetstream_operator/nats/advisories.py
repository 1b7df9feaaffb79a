"""JetStream advisories: the server announces stream and consumer changes as they happen."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

STREAM_ADVISORIES = "$JS.EVENT.ADVISORY.STREAM.*.*"
CONSUMER_ADVISORIES = "$JS.EVENT.ADVISORY.CONSUMER.*.*.*"
_WATCHED_ACTIONS = {"UPDATED", "DELETED", "CREATED"}


def stream_from_subject(subject: str) -> str | None:
    """The stream a stream advisory is about; None for other advisories."""
    parts = subject.split(".")
    if len(parts) != 6 or parts[3] != "STREAM" or parts[4] not in _WATCHED_ACTIONS:
        return None
    return parts[5]


def consumer_from_subject(subject: str) -> tuple[str, str] | None:
    """(stream, consumer) of a consumer created/deleted advisory; None for other advisories."""
    parts = subject.split(".")
    if len(parts) != 7 or parts[3] != "CONSUMER" or parts[4] not in _WATCHED_ACTIONS:
        return None
    return parts[5], parts[6]


async def subscribe_changes(
    connection: Client,
    on_stream: Callable[[str], Awaitable[None]],
    on_consumer: Callable[[str, str], Awaitable[None]],
) -> None:
    """Call back for every stream and consumer created, updated or deleted in the account."""

    async def stream_message(message: Msg) -> None:
        stream = stream_from_subject(message.subject)
        if stream is not None:
            await on_stream(stream)

    async def consumer_message(message: Msg) -> None:
        found = consumer_from_subject(message.subject)
        if found is not None:
            await on_consumer(*found)

    await connection.subscribe(STREAM_ADVISORIES, cb=stream_message)
    await connection.subscribe(CONSUMER_ADVISORIES, cb=consumer_message)
