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


def test_the_operator_started_by_the_cli_runs_with_those_thresholds() -> None:
    """`jetstream-operator run` sets them before kopf starts; kopf.run is swapped for a probe
    in a child process, so nothing connects anywhere."""
    import json
    import subprocess
    import sys

    probe = (
        "import gc, json, kopf; from jetstream_operator import cli; "
        "kopf.run = lambda **_: print(json.dumps(gc.get_threshold())); "
        "raise SystemExit(cli.main(['run']))"
    )
    finished = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert finished.returncode == 0, finished.stderr
    young, _, _ = json.loads(finished.stdout.strip().splitlines()[-1])
    assert young == YOUNG_COLLECTION_THRESHOLD
