"""deletionPolicy: DeleteIfEmpty: what keeps a stream, read from its info and consumers."""

from __future__ import annotations

from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY, still_holding

OURS = {"config": {"name": "worker", "metadata": {OWNER_METADATA_KEY: "ns/c/uid"}}}


def test_messages_and_unmanaged_consumers_keep_a_stream() -> None:
    assert still_holding({"state": {"messages": 0}}, [OURS]) is None
    assert still_holding({"state": {"messages": 1}}, []) == "1 message"
    app = [{"config": {"name": f"app{index}"}} for index in range(7)]
    held = still_holding({"state": {"messages": 3}}, [OURS, *app])
    assert held == (
        "3 messages and consumers no resource manages (app0, app1, app2, app3, app4 and 2 more)"
    )
