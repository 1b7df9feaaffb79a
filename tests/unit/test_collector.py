"""The operator's tuning of Python's cyclic garbage collector (cli.collect_garbage_less_often)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from jetstream_operator.cli import YOUNG_COLLECTION_THRESHOLD, collect_garbage_less_often


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 7, 9)
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*before)


def test_young_collections_are_rarer_and_the_older_generations_keep_their_ratios(
    thresholds: tuple[int, int, int],
) -> None:
    collect_garbage_less_often()
    assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, 7, 9)
    assert gc.isenabled()
