import pytest

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
