"""The JetStream requests that change an account's counts are heard of, and no others."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from jetstream_operator.nats.jsapi import JetStreamApi, JetStreamError


class Connection:
    """Answers every request with `answer`."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer

    async def request(self, subject: str, payload: bytes, timeout: float) -> Any:
        return SimpleNamespace(data=json.dumps(self.answer).encode())


@pytest.mark.parametrize(
    ("subject", "changes"),
    [
        ("STREAM.CREATE.ORDERS", 1),
        ("STREAM.DELETE.ORDERS", 1),
        ("CONSUMER.CREATE.ORDERS.C1", 1),
        ("CONSUMER.DURABLE.CREATE.ORDERS.C1", 1),
        ("CONSUMER.DELETE.ORDERS.C1", 1),
        ("STREAM.INFO.ORDERS", 0),
        ("STREAM.UPDATE.ORDERS", 0),
        ("STREAM.LIST", 0),
        ("INFO", 0),
    ],
)
async def test_creations_and_deletions_change_the_account(subject: str, changes: int) -> None:
    heard: list[None] = []
    api = JetStreamApi(Connection({}), on_account_change=lambda: heard.append(None))  # type: ignore[arg-type]
    await api.request(subject)
    assert len(heard) == changes


async def test_a_refused_creation_changes_nothing() -> None:
    heard: list[None] = []
    refusal = {"error": {"code": 400, "err_code": 10058, "description": "stream name in use"}}
    api = JetStreamApi(Connection(refusal), on_account_change=lambda: heard.append(None))  # type: ignore[arg-type]
    with pytest.raises(JetStreamError):
        await api.request("STREAM.CREATE.ORDERS")
    assert heard == []
