"""Every kopf adaptation applies to the kopf pyproject pins, says so, and says loudly when not.

If a kopf upgrade moves what one of them replaces, `test_every_adaptation_applies_to_the_
installed_kopf` fails by its name (`make test-kopf-latest` runs this against the newest kopf)
rather than the operator silently losing it."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import logging
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import api, fetching, watching
from kopf._cogs.structs import patches, references
from kopf._core.reactor import observation, queueing

from jetstream_operator import kopf_adaptations
from jetstream_operator.kopf_adaptations import (
    ADAPTATIONS,
    KOPF_WRITTEN_FOR,
    LATE_NAMESPACES,
    LIGHTER_PATCH_REMAINDERS,
    Adaptation,
    adapt_kopf,
    minor_of,
)
from jetstream_operator.metrics import REGISTRY

ROOT = Path(__file__).parents[2]

REPLACED: list[tuple[Any, str]] = [
    (queueing, "worker"),
    (queueing, "aiotasks"),
    (patches.Patch, "as_json_patch"),
    (api, "json"),
    (fetching, "fetch_objs"),
    (observation, "process_discovered_namespace_event"),
]
"""What the adaptations replace in kopf, put back after each test."""


@pytest.fixture(autouse=True)
def kopf_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    for owner, name in REPLACED:
        monkeypatch.setattr(owner, name, getattr(owner, name))


def gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value(
        "jetstream_operator_kopf_adaptation_applied", {"adaptation": name}
    )


def test_every_adaptation_applies_to_the_installed_kopf(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=kopf_adaptations.__name__):
        adapted = adapt_kopf()
    assert adapted == {adaptation.name: True for adaptation in ADAPTATIONS}, caplog.text
    assert not caplog.records
    for adaptation in ADAPTATIONS:
        assert gauge(adaptation.name) == 1.0
        assert adaptation.in_place()
    assert adapt_kopf() == adapted  # twice changes nothing


@pytest.mark.parametrize("adaptation", ADAPTATIONS, ids=lambda adaptation: adaptation.name)
def test_what_each_adaptation_replaces_has_the_shape_it_expects(adaptation: Adaptation) -> None:
    """Apart from the version: which adaptations a newer kopf still fits."""
    assert adaptation.misfit() is None


def test_pyproject_pins_kopf_to_the_minor_the_adaptations_were_written_for() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    major, minor = KOPF_WRITTEN_FOR.split(".")
    pin = f"kopf>={KOPF_WRITTEN_FOR},<{major}.{int(minor) + 1}"
    assert pin in project["dependencies"]
    assert minor_of(kopf_adaptations.running_kopf_version()) == KOPF_WRITTEN_FOR


def test_nothing_else_in_the_operator_touches_kopfs_internals() -> None:
    for path in (ROOT / "operator").rglob("*.py"):
        if path.name == "kopf_adaptations.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            private = [name for name in modules if name.startswith("kopf._")]
            assert not private, f"{path} imports {private}"


@pytest.mark.parametrize("adaptation", ADAPTATIONS, ids=lambda adaptation: adaptation.name)
def test_on_another_kopf_minor_kopf_keeps_its_own_and_a_warning_says_what_it_costs(
    adaptation: Adaptation, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(kopf_adaptations, "running_kopf_version", lambda: "1.99.0")
    kopfs_own = [getattr(owner, name) for owner, name in REPLACED]
    with caplog.at_level(logging.WARNING, logger=kopf_adaptations.__name__):
        assert not adaptation.apply()
    assert [getattr(owner, name) for owner, name in REPLACED] == kopfs_own
    assert not adaptation.in_place()
    assert gauge(adaptation.name) == 0.0
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    for said in (adaptation.name, "1.99.0", f"written for kopf {KOPF_WRITTEN_FOR}"):
        assert said in record.getMessage()
    assert adaptation.without_it in record.getMessage()


def test_a_moved_internal_leaves_kopfs_own_code_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A shape that no longer fits: kopf's own as_json_patch stays, and still works."""
    moved = dataclasses.replace(LIGHTER_PATCH_REMAINDERS, misfit=lambda: "kopf's Patch moved")
    kopfs_own = patches.Patch.as_json_patch
    with caplog.at_level(logging.WARNING, logger=kopf_adaptations.__name__):
        assert not moved.apply()
    assert "kopf's Patch moved" in caplog.text
    assert gauge(moved.name) == 0.0
    assert patches.Patch.as_json_patch is kopfs_own
    body: Any = {"metadata": {"name": "orders"}, "spec": {"a": 1}}
    patch = patches.Patch({"spec": {"a": 2}})
    assert patch.as_json_patch(body) == [{"op": "replace", "path": "/spec/a", "value": 2}]


def test_a_module_kopf_moved_is_a_misfit_not_a_crash(caplog: pytest.LogCaptureFixture) -> None:
    def moved() -> bool:
        raise ModuleNotFoundError("No module named 'kopf._core.reactor.queueing'")

    gone = dataclasses.replace(LATE_NAMESPACES, in_place=moved)
    with caplog.at_level(logging.WARNING, logger=kopf_adaptations.__name__):
        assert not gone.apply()
    assert "kopf's internals moved: No module named" in caplog.text
    assert gauge(gone.name) == 0.0


# -- the namespace observer's race ------------------------------------------------------------


def namespace(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}}


async def served_namespaces(
    monkeypatch: pytest.MonkeyPatch, listings: list[list[str]], patterns: list[str]
) -> set[Any]:
    """kopf's own namespace observer, on API answers of namespaces listed once by the observer
    and once by its watcher before it watches (an empty watch): the namespaces it then serves."""
    answers = iter(listings)
    listed = 0

    async def fetch_objs(**_: Any) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        nonlocal listed
        names = next(answers)
        listed += 1
        yield [namespace(name) for name in names], str(listed)

    async def watch_objs(**_: Any) -> AsyncIterator[dict[str, Any]]:
        await asyncio.Event().wait()  # nothing happens after the second listing
        yield {}

    processing = observation.process_discovered_namespace_event  # kopf's, or adapted
    processed = 0

    async def counting(**kwargs: Any) -> None:
        nonlocal processed
        await processing(**kwargs)
        processed += 1

    monkeypatch.setattr(observation, "process_discovered_namespace_event", counting)
    monkeypatch.setattr(fetching, "fetch_objs", fetch_objs)
    monkeypatch.setattr(watching, "watch_objs", watch_objs)
    settings = kopf.OperatorSettings()
    settings.queueing.exit_timeout = 0.1
    insights = references.Insights()
    await insights.backbone.fill(resources=[references.Resource("", "v1", "namespaces")])
    task = asyncio.create_task(
        observation.namespace_observer(
            clusterwide=False, namespaces=patterns, insights=insights, settings=settings
        )
    )
    try:
        async with asyncio.timeout(10):  # every namespace of the watcher's listing processed
            while processed < len(listings[-1]):
                await asyncio.sleep(0.01)
        return set(insights.namespaces)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


RACE = [["team-a", "other"], ["team-a", "team-b", "other"]]
"""team-b was created between the observer's listing and its watcher's."""


async def test_kopf_alone_misses_a_namespace_created_between_its_two_listings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race notice_late_namespaces is for: if a kopf release fixes it, this fails, and the
    adaptation can go."""
    assert await served_namespaces(monkeypatch, RACE, ["team-*"]) == {"team-a"}


async def test_a_namespace_created_between_kopfs_two_listings_is_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert LATE_NAMESPACES.apply()
    assert await served_namespaces(monkeypatch, RACE, ["team-*,!team-x"]) == {
        "team-a",
        "team-b",
    }
    excluded = [["team-a"], ["team-a", "team-x"]]
    assert await served_namespaces(monkeypatch, excluded, ["team-*,!team-x"]) == {"team-a"}


async def test_waiting_workers_are_started_a_namespace_at_a_time() -> None:
    """kopf's own scheduler, as its watcher makes it once the adaptation is in place, with
    kopf's worker arguments: a namespace with many resources waiting takes one turn."""
    assert kopf_adaptations.FAIR_WORKERS.apply()
    started: list[str] = []
    release = asyncio.Event()
    streams: dict[Any, Any] = {}

    async def worker(*, streams: dict[Any, Any], key: Any) -> None:
        started.append(key[1])
        await release.wait()

    made_by_watcher: Any = queueing
    scheduler = made_by_watcher.aiotasks.Scheduler(limit=1)
    try:
        arrivals = [("a", f"a{index}") for index in range(4)] + [("b", "b0"), ("c", "c0")]
        for namespace, uid in arrivals:
            key = ("streams", uid)
            streams[key] = SimpleNamespace(backlog=asyncio.Queue())
            streams[key].backlog.put_nowait({"object": {"metadata": {"namespace": namespace}}})
            await scheduler.spawn(worker(streams=streams, key=key), name=uid)
        for _ in range(len(arrivals) - 1):
            await asyncio.sleep(0.01)
            release.set()
            await asyncio.sleep(0.01)
            release.clear()
    finally:
        release.set()
        await scheduler.close()
    # a0 takes the one place at once; then b and c each get theirs before a's next ones.
    assert started[:4] == ["a0", "a1", "b0", "c0"], started
    assert sorted(started) == sorted(uid for _, uid in arrivals)
