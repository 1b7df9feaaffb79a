"""The reset annotations read as the docs say, once per token, and a malformed target is
refused with a message naming what is allowed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jetstream_operator.reconcile.consumer_reset import (
    RESET_ANNOTATION,
    RESET_TO_ANNOTATION,
    InvalidReset,
    ResetRequest,
    kept_position,
    pending_reset,
    positioned_config,
    sequence_after_ack_floor,
)
from jetstream_operator.reconcile.ownership import START_FOR_KEY, START_SEQUENCE_KEY


def asked(target: str | None, token: str = "t1") -> dict[str, str]:
    annotations = {RESET_ANNOTATION: token}
    if target is not None:
        annotations[RESET_TO_ANNOTATION] = target
    return annotations


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (None, ResetRequest("t1")),
        ("ackFloor", ResetRequest("t1")),
        ("20", ResetRequest("t1", sequence=20)),
        (
            "2026-12-07T10:00:00Z",
            ResetRequest("t1", time=datetime(2026, 12, 7, 10, tzinfo=UTC)),
        ),
    ],
)
def test_targets(target: str | None, expected: ResetRequest) -> None:
    assert pending_reset(asked(target), {}) == expected


@pytest.mark.parametrize("target", ["0", "-3", "soon", "2026-12-07T10:00:00"])
def test_a_malformed_target_is_refused_for_its_token(target: str) -> None:
    with pytest.raises(InvalidReset, match="reset-to must be a stream sequence") as caught:
        pending_reset(asked(target, token="t2"), {})
    assert caught.value.token == "t2"


def test_a_token_is_done_once() -> None:
    assert pending_reset({}, {}) is None
    assert pending_reset(asked("5"), {"lastReset": {"token": "t1"}}) is None
    assert pending_reset(asked("5", token="t3"), {"lastReset": {"token": "t1"}}) is not None


def test_ack_floor_and_positions() -> None:
    assert sequence_after_ack_floor({"ack_floor": {"stream_seq": 49}}) == 50
    assert sequence_after_ack_floor({}) == 1
    # Started at 20 by sequence, nothing delivered yet: 2.12 shows an ack floor of 0.
    fresh = {"ack_floor": {"stream_seq": 0}, "delivered": {"stream_seq": 19}}
    assert sequence_after_ack_floor(fresh) == 20
    unacked = {"ack_floor": {"stream_seq": 30}, "delivered": {"stream_seq": 35}}
    assert sequence_after_ack_floor({**unacked, "num_ack_pending": 5}) == 31
    desired = {"deliver_policy": "all", "opt_start_seq": 0, "metadata": {"a": "b"}}
    positioned = positioned_config(desired, 50)
    assert positioned["deliver_policy"] == "by_start_sequence"
    assert positioned["opt_start_seq"] == 50
    assert positioned["metadata"] == {"a": "b", START_SEQUENCE_KEY: "50", START_FOR_KEY: "all;;"}
    assert kept_position(desired, positioned) == positioned
    moved = {**desired, "deliver_policy": "new"}
    assert kept_position(moved, positioned) == moved
    assert kept_position(desired, {"metadata": {START_SEQUENCE_KEY: "x"}}) == desired
