"""The worker setting reaches kopf: a limit when set, none for 0, and workers that let go of
their place soon after their last event (a place held idle for kopf's 5 s would throttle a
limited operator to a few resources a second)."""

from __future__ import annotations

import kopf
import pytest

from jetstream_operator.main import WORKER_IDLE_TIMEOUT, tune_queueing


@pytest.mark.parametrize(("workers", "limit"), [(0, None), (1, 1), (16, 16)])
def test_workers_become_kopfs_limit(workers: int, limit: int | None) -> None:
    settings = kopf.OperatorSettings()
    tune_queueing(settings, workers)
    assert settings.queueing.worker_limit == limit
    assert settings.queueing.idle_timeout == WORKER_IDLE_TIMEOUT < 1.0
