"""JetStream advisories: the server announces stream and consumer changes as they happen."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from ..metrics import ADVISORIES

STREAM_ADVISORIES = "$JS.EVENT.ADVISORY.STREAM.*.*"
CONSUMER_ADVISORIES = "$JS.EVENT.ADVISORY.CONSUMER.*.*.*"
# The server sends no advisory when a consumer's config is updated, only this audit of every
# JetStream API request in the account; it is how an out-of-band consumer update is seen at once.
API_AUDIT = "$JS.EVENT.ADVISORY.API"
_WATCHED_ACTIONS = {"UPDATED", "DELETED", "CREATED", "PAUSE"}
_CONSUMER_WRITES = ("$JS.API.CONSUMER.CREATE.", "$JS.API.CONSUMER.DURABLE.CREATE.")
_STREAM_DELETE = "$JS.API.STREAM.DELETE."
_AUDITED_WRITES = tuple(subject.encode() for subject in (*_CONSUMER_WRITES, _STREAM_DELETE))


def stream_from_subject(subject: str) -> str | None:
    """The stream a stream advisory is about; None for other advisories."""
    parts = subject.split(".")
    if len(parts) != 6 or parts[3] != "STREAM" or parts[4] not in _WATCHED_ACTIONS:
        return None
    return parts[5]


def _action(subject: str) -> str:
    """CREATED, UPDATED, DELETED...: the fifth token of an advisory's subject."""
    parts = subject.split(".")
    return parts[4] if len(parts) > 4 else ""


def consumer_from_subject(subject: str) -> tuple[str, str] | None:
    """(stream, consumer) of a consumer created/deleted/paused advisory; None for others."""
    parts = subject.split(".")
    if len(parts) != 7 or parts[3] != "CONSUMER" or parts[4] not in _WATCHED_ACTIONS:
        return None
    return parts[5], parts[6]


ClientIdentity = tuple[str, int]
"""(server name, client id): who made a request, as the audit names it."""


def _others_answer(
    audit: dict[str, Any], prefixes: str | tuple[str, ...], ourselves: ClientIdentity | None
) -> tuple[str, dict[str, Any]] | None:
    """(subject, response) of a request under `prefixes` that another client made and the
    server did not refuse."""
    subject = str(audit.get("subject") or "")
    if not subject.startswith(prefixes):
        return None
    client = audit.get("client") or {}
    if ourselves is not None and (client.get("server"), client.get("id")) == ourselves:
        return None
    try:
        response = json.loads(audit.get("response") or "{}")
    except ValueError:
        return None
    if not isinstance(response, dict) or response.get("error"):
        return None
    return subject, response


def consumer_written_by_audit(
    audit: dict[str, Any], ourselves: ClientIdentity | None
) -> tuple[str, str] | None:
    """(stream, consumer) a successful consumer create/update made by someone else changed."""
    answer = _others_answer(audit, _CONSUMER_WRITES, ourselves)
    if answer is None:
        return None
    stream, name = answer[1].get("stream_name"), answer[1].get("name")
    if not isinstance(stream, str) or not isinstance(name, str):
        return None
    return stream, name


def stream_deleted_by_audit(audit: dict[str, Any], ourselves: ClientIdentity | None) -> str | None:
    """The stream a successful STREAM.DELETE by someone else removed. nats-server queues a
    stream's deletion advisory on the stream's own send queue while it shuts that queue down,
    and loses it now and then (3 of 70 in a bench run); the audit of the request is sent by the
    account, so it is the one to trust."""
    answer = _others_answer(audit, _STREAM_DELETE, ourselves)
    if answer is None or not answer[1].get("success"):
        return None
    return answer[0][len(_STREAM_DELETE) :] or None


def client_identity(connection: Client) -> ClientIdentity | None:
    """This connection as audits name it; it changes on every reconnect."""
    server = (connection._server_info or {}).get("server_name")  # nats-py has no accessor
    client_id = connection.client_id
    if not isinstance(server, str) or not isinstance(client_id, int):
        return None
    return server, client_id


async def subscribe_changes(
    connection: Client,
    on_stream: Callable[[str, str], Awaitable[None]],
    on_consumer: Callable[[str, str, str], Awaitable[None]],
) -> None:
    """Call back for every stream and consumer created, updated or deleted in the account by
    anyone, for consumers created or updated by other clients, and for streams they deleted,
    with the action (CREATED, UPDATED, DELETED, PAUSE; a consumer write seen in the audit is
    UPDATED)."""

    async def stream_message(message: Msg) -> None:
        ADVISORIES.labels("stream", _action(message.subject)).inc()
        stream = stream_from_subject(message.subject)
        if stream is not None:
            await on_stream(stream, _action(message.subject))

    async def consumer_message(message: Msg) -> None:
        ADVISORIES.labels("consumer", _action(message.subject)).inc()
        found = consumer_from_subject(message.subject)
        if found is not None:
            await on_consumer(*found, _action(message.subject))

    async def audit_message(message: Msg) -> None:
        if not any(subject in message.data for subject in _AUDITED_WRITES):
            return  # most audits are about other requests (INFO, LIST): skip parsing them
        try:
            audit = json.loads(message.data)
        except ValueError:
            return
        if not isinstance(audit, dict):
            return
        ourselves = client_identity(connection)
        found = consumer_written_by_audit(audit, ourselves)
        if found is not None:
            await on_consumer(*found, "UPDATED")
        deleted = stream_deleted_by_audit(audit, ourselves)
        if deleted is not None:
            ADVISORIES.labels("api audit", "STREAM.DELETE").inc()
            await on_stream(deleted, "DELETED")

    await connection.subscribe(STREAM_ADVISORIES, cb=stream_message)
    await connection.subscribe(CONSUMER_ADVISORIES, cb=consumer_message)
    await connection.subscribe(API_AUDIT, cb=audit_message)
