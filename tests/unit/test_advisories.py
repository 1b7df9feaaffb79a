import json
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import cast

from nats.aio.client import Client
from nats.aio.msg import Msg

from jetstream_operator.metrics import REGISTRY
from jetstream_operator.nats.advisories import (
    CONSUMER_ADVISORIES,
    STREAM_ADVISORIES,
    consumer_from_subject,
    consumer_written_by_audit,
    stream_deleted_by_audit,
    stream_from_subject,
    subscribe_changes,
)


def test_stream_advisory_subjects() -> None:
    assert stream_from_subject("$JS.EVENT.ADVISORY.STREAM.UPDATED.ORDERS") == "ORDERS"
    assert stream_from_subject("$JS.EVENT.ADVISORY.STREAM.DELETED.ORDERS") == "ORDERS"
    assert stream_from_subject("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ORDERS") is None
    assert stream_from_subject("$JS.EVENT.ADVISORY.CONSUMER.DELETED.ORDERS.C") is None


def test_consumer_advisory_subjects() -> None:
    assert consumer_from_subject("$JS.EVENT.ADVISORY.CONSUMER.DELETED.ORDERS.C") == (
        "ORDERS",
        "C",
    )
    assert consumer_from_subject("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ORDERS.C") is None
    assert consumer_from_subject("$JS.EVENT.ADVISORY.STREAM.UPDATED.ORDERS") is None


def audit(
    subject: str, response: dict[str, object], server: str = "n1", cid: int = 7
) -> dict[str, object]:
    return {
        "type": "io.nats.jetstream.advisory.v1.api_audit",
        "client": {"server": server, "id": cid},
        "subject": subject,
        "response": json.dumps(response),
    }


CREATED = {"type": "io.nats.jetstream.api.v1.consumer_create_response", "stream_name": "S"}


def test_consumer_update_by_another_client_is_seen_in_the_audit() -> None:
    update = audit("$JS.API.CONSUMER.CREATE.S.C", {**CREATED, "name": "C"})
    assert consumer_written_by_audit(update, ("n1", 3)) == ("S", "C")
    durable = audit("$JS.API.CONSUMER.DURABLE.CREATE.S.D", {**CREATED, "name": "D"})
    assert consumer_written_by_audit(durable, None) == ("S", "D")
    # The old form names the consumer only in the body; the response names it too.
    unnamed = audit("$JS.API.CONSUMER.CREATE.S", {**CREATED, "name": "E"})
    assert consumer_written_by_audit(unnamed, None) == ("S", "E")


def test_audits_that_change_no_consumer_are_ignored() -> None:
    ours = audit("$JS.API.CONSUMER.CREATE.S.C", {**CREATED, "name": "C"}, "n1", 7)
    assert consumer_written_by_audit(ours, ("n1", 7)) is None
    same_id_other_server = audit("$JS.API.CONSUMER.CREATE.S.C", {**CREATED, "name": "C"}, "n2", 7)
    assert consumer_written_by_audit(same_id_other_server, ("n1", 7)) == ("S", "C")
    refused = audit("$JS.API.CONSUMER.CREATE.S.C", {"error": {"code": 400}})
    assert consumer_written_by_audit(refused, None) is None
    info = audit("$JS.API.CONSUMER.INFO.S.C", {**CREATED, "name": "C"})
    assert consumer_written_by_audit(info, None) is None
    broken = {**info, "subject": "$JS.API.CONSUMER.CREATE.S.C", "response": "{not json"}
    assert consumer_written_by_audit(broken, None) is None


DELETED = {"type": "io.nats.jetstream.api.v1.stream_delete_response", "success": True}


def test_a_stream_deleted_by_another_client_is_seen_in_the_audit() -> None:
    """Its deletion advisory is sometimes lost; the audit of the request is the sure sign."""
    theirs = audit("$JS.API.STREAM.DELETE.ORDERS", DELETED, "n1", 3)
    assert stream_deleted_by_audit(theirs, ("n1", 7)) == "ORDERS"
    ours = audit("$JS.API.STREAM.DELETE.ORDERS", DELETED, "n1", 7)
    assert stream_deleted_by_audit(ours, ("n1", 7)) is None
    missing = audit("$JS.API.STREAM.DELETE.ORDERS", {"error": {"code": 404, "err_code": 10059}})
    assert stream_deleted_by_audit(missing, None) is None
    info = audit("$JS.API.STREAM.INFO.ORDERS", DELETED)
    assert stream_deleted_by_audit(info, None) is None


def test_pause_advisories_are_watched() -> None:
    assert consumer_from_subject("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.S.C") == ("S", "C")


async def test_every_stream_and_consumer_advisory_is_counted_by_action() -> None:
    """The count is what tells a lost advisory from a repair that did not happen."""
    callbacks: dict[str, Callable[[Msg], Awaitable[None]]] = {}

    class Subscriber:
        async def subscribe(self, subject: str, cb: Callable[[Msg], Awaitable[None]]) -> None:
            callbacks[subject] = cb

    def counted(about: str, action: str) -> float:
        labels = {"about": about, "action": action}
        return REGISTRY.get_sample_value("jetstream_operator_advisories_total", labels) or 0.0

    seen: list[object] = []

    async def on_stream(stream: str, action: str) -> None:
        seen.append((stream, action))

    async def on_consumer(stream: str, consumer: str, action: str) -> None:
        seen.append((stream, consumer, action))

    before = counted("stream", "DELETED"), counted("consumer", "DELETED")
    await subscribe_changes(cast(Client, Subscriber()), on_stream, on_consumer)
    for subscription, subject in (
        (STREAM_ADVISORIES, "$JS.EVENT.ADVISORY.STREAM.DELETED.ORDERS"),
        (CONSUMER_ADVISORIES, "$JS.EVENT.ADVISORY.CONSUMER.DELETED.ORDERS.C"),
    ):
        message = cast(Msg, SimpleNamespace(subject=subject, data=b""))
        await callbacks[subscription](message)
    assert seen == [("ORDERS", "DELETED"), ("ORDERS", "C", "DELETED")]
    assert (counted("stream", "DELETED"), counted("consumer", "DELETED")) == (
        before[0] + 1,
        before[1] + 1,
    )
