"""Purges asked for by annotation: pending once per token, and a malformed one declined."""

from __future__ import annotations

import asyncio

import pytest

from jetstream_operator.handlers.operations import purge_if_asked
from jetstream_operator.handlers.results import Result
from jetstream_operator.reconcile.backed import STREAM_KIND
from jetstream_operator.reconcile.conditions import Outcome
from jetstream_operator.reconcile.purge import (
    PURGE_ANNOTATION,
    PURGE_KEEP_ANNOTATION,
    PURGE_SUBJECT_ANNOTATION,
    InvalidPurge,
    PurgeRequest,
    pending_purge,
)


def test_no_annotation_means_no_purge() -> None:
    assert pending_purge({}, {}) is None


def test_new_token_is_pending_until_recorded() -> None:
    annotations = {PURGE_ANNOTATION: "2026-11-21"}
    assert pending_purge(annotations, {}) == PurgeRequest("2026-11-21")
    assert pending_purge(annotations, {"lastPurge": {"token": "2026-11-21"}}) is None
    assert pending_purge(annotations, {"lastPurge": {"token": "older"}}) is not None


def test_subject_and_keep_shape_the_request() -> None:
    request = pending_purge(
        {PURGE_ANNOTATION: "t", PURGE_SUBJECT_ANNOTATION: "orders.eu", PURGE_KEEP_ANNOTATION: "5"},
        {},
    )
    assert request is not None
    assert request.body() == {"filter": "orders.eu", "keep": 5}


def test_bad_keep_is_refused_with_a_reason() -> None:
    with pytest.raises(InvalidPurge, match="whole number"):
        pending_purge({PURGE_ANNOTATION: "t", PURGE_KEEP_ANNOTATION: "-1"}, {})


def test_a_malformed_purge_warns_once_and_leaves_ready_as_it_was() -> None:
    """The stream is still as declared: Ready stays; the token is recorded with the error, so
    the Warning is posted once and nothing is tried again for it."""
    annotations = {PURGE_ANNOTATION: "t1", PURGE_KEEP_ANNOTATION: "many"}
    result = asyncio.run(
        purge_if_asked(STREAM_KIND, {"name": "ORDERS"}, annotations, {}, None)  # type: ignore[arg-type]
    )
    assert result is not None
    synced = Result(Outcome(True, "Synced", "stream ORDERS matches the spec")).then(result)
    assert synced.outcome.ready and synced.outcome.reason == "Synced"
    assert synced.status["lastPurge"]["token"] == "t1"
    assert "whole number" in synced.status["lastPurge"]["error"]
    assert [event.reason for event in synced.events] == ["InvalidPurge"]
    recorded = {"lastPurge": synced.status["lastPurge"]}
    assert (
        asyncio.run(
            purge_if_asked(STREAM_KIND, {"name": "ORDERS"}, annotations, recorded, None)  # type: ignore[arg-type]
        )
        is None
    )
