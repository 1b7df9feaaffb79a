"""JetStream advisories: the server announces stream changes and deletions as they happen."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

STREAM_ADVISORIES = "$JS.EVENT.ADVISORY.STREAM.*.*"
_WATCHED_ACTIONS = {"UPDATED", "DELETED", "CREATED"}


def stream_from_subject(subject: str) -> str | None:
    """The stream an advisory is about; None for advisories that are not stream changes."""
    parts = subject.split(".")
    if len(parts) != 6 or parts[4] not in _WATCHED_ACTIONS:
        return None
    return parts[5]


async def subscribe_stream_changes(
    connection: Client, notify: Callable[[str], Awaitable[None]]
) -> Subscription:
    """Call `notify(stream)` for every stream created, updated or deleted in the account."""

    async def on_message(message: Msg) -> None:
        stream = stream_from_subject(message.subject)
        if stream is not None:
            await notify(stream)

    return await connection.subscribe(STREAM_ADVISORIES, cb=on_message)
