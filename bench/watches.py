"""Watches that count Ready objects and every later change, for any controller's CRDs: polling
lists of 10,000 objects would load the API server more than the controller does."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from kubernetes import client, watch

from jetstream_operator import GROUP, VERSION

WATCH_RESTARTS = 50
"""A watch that fails more often than this in one run is a broken server, not load."""


def is_ready(item: dict[str, Any]) -> bool:
    conditions = (item.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def short(value: Any, length: int = 60) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= length else text[: length - 3] + "..."


def counted_changes(
    watches: list[ObjectWatch],
) -> tuple[Counter[str], Counter[str], dict[str, str]]:
    """What the watches counted since `count_from()`: modifications by kind, by field, and the
    first change of each field."""
    kinds: Counter[str] = Counter()
    fields: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for each in watches:
        kinds.update(each.changes)
        fields.update(each.fields)
        for key, example in each.examples.items():
            examples.setdefault(key, example)
    return kinds, fields, examples


class ObjectWatch:
    """One plural in one namespace, followed in a thread: which objects are Ready, when the last
    one turned Ready, and every change after `count_from()` (who wrote what, and when).

    A watch that ends with an error (410 Gone, 504 "Too large resource version" under load, a
    dropped connection) starts again from a fresh list, at most WATCH_RESTARTS times."""

    def __init__(
        self,
        objects: client.CustomObjectsApi,
        namespace: str,
        plural: str,
        group: str = GROUP,
        version: str = VERSION,
        kind_of: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        self.plural = plural
        self.ready: set[str] = set()
        self.last_ready = 0.0
        self.ready_times: list[float] = []
        """When each object first turned Ready (monotonic), for the convergence timeline."""
        self.changes: Counter[str] = Counter()
        self.fields: Counter[str] = Counter()
        """Which status keys (or `metadata`) the counted modifications changed."""
        self.examples: dict[str, str] = {}
        """Per changed key, the first counted change: "object: before -> after"."""
        self._seen: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        self.last_change = 0.0
        self.restarts = 0
        self.listed = threading.Event()
        self.last_gone = 0.0
        self.error: str | None = None
        self._counting = False
        self._kind_of = kind_of or (lambda item: plural)
        self._where = (objects, group, version, namespace, plural)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _list(self, **options: Any) -> Any:
        """The list call, a plain function for kubernetes' watch (which passes watch=True)."""
        objects, group, version, namespace, plural = self._where
        return objects.list_namespaced_custom_object(group, version, namespace, plural, **options)

    def count_from(self) -> None:
        """Count modifications from now on (and forget earlier ones)."""
        self.changes.clear()
        self.fields.clear()
        self.examples.clear()
        self.last_change = 0.0
        self._counting = True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except Exception as error:  # any failure restarts from a list
                if self._stop.is_set():
                    return
                self.restarts += 1
                if self.restarts > WATCH_RESTARTS:
                    self.error = f"{self.plural} watch failed {self.restarts} times: {error}"
                    return
                time.sleep(min(5.0, 0.2 * self.restarts))

    def _follow(self) -> None:
        listing = cast(dict[str, Any], self._list())
        for item in listing["items"]:
            self._remember(item["metadata"]["name"], item, False)
        self._update(
            {item["metadata"]["name"] for item in listing["items"] if is_ready(item)}, None
        )
        self.listed.set()
        version = listing["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                self._list, resource_version=version, timeout_seconds=30
            )
            for event in stream:
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch error: {event['raw_object']}")
                item = event["object"]
                version = item["metadata"]["resourceVersion"]
                name = item["metadata"]["name"]
                seen = self._remember(name, item, event["type"] == "DELETED")
                if event["type"] == "MODIFIED" and self._counting:
                    self.changes[self._kind_of(item)] += 1
                    self.fields.update(seen.keys())
                    for key, example in seen.items():
                        self.examples.setdefault(key, example)
                    self.last_change = time.monotonic()
                if event["type"] != "DELETED" and is_ready(item):
                    self._update({name}, None)
                else:
                    self._update(set(), name)
                if self._stop.is_set():
                    return

    def _remember(self, name: str, item: dict[str, Any], gone: bool) -> dict[str, str]:
        """Keeps the object's status and metadata (without resourceVersion and managedFields);
        returns the status keys that differ from the last seen (`metadata` if it changed), each
        with the change ("name: before -> after"), so a report can say which value was right."""
        status = dict(item.get("status") or {})
        metadata = {
            k: v
            for k, v in item["metadata"].items()
            if k not in ("resourceVersion", "managedFields", "generation")
        }
        before_status, before_metadata = self._seen.get(name, ({}, metadata))
        if gone:
            self._seen.pop(name, None)
            self.last_gone = time.monotonic()
        else:
            self._seen[name] = (status, metadata)
        changed = {
            f"{self._kind_of(item)}: status.{key}": (
                f"{name}: {short(before_status.get(key))} -> {short(status.get(key))}"
            )
            for key in set(status) | set(before_status)
            if status.get(key) != before_status.get(key)
        }
        if metadata != before_metadata:
            changed[f"{self._kind_of(item)}: metadata"] = name
        return changed

    def _update(self, ready: set[str], gone: str | None) -> None:
        before = len(self.ready)
        self.ready |= ready
        if gone is not None:
            self.ready.discard(gone)
        if len(self.ready) > before:
            self.last_ready = time.monotonic()
            self.ready_times.extend([self.last_ready] * (len(self.ready) - before))

    @property
    def present(self) -> int:
        """Objects that exist now, as the watch has seen them."""
        return len(self._seen)

    def names(self) -> list[str]:
        return list(self._seen)

    def check(self) -> None:
        if self.error:
            raise RuntimeError(self.error)

    def stop(self) -> None:
        self._stop.set()


TIMELINE_SHARES = (0.01, 0.25, 0.5, 0.75, 1.0)
"""Shares of a kind's resources at which the convergence timeline says how long it took."""


def timeline(watches: list[ObjectWatch], started: float) -> dict[str, list[float]]:
    """Per plural (over every namespace), seconds from `started` until each share of
    TIMELINE_SHARES was Ready: where a convergence spends its time."""
    times: dict[str, list[float]] = {}
    for each in watches:
        times.setdefault(each.plural, []).extend(each.ready_times)
    return {
        plural: [
            ordered[max(0, math.ceil(len(ordered) * share) - 1)] - started
            for share in TIMELINE_SHARES
        ]
        for plural, found in times.items()
        if (ordered := sorted(found))
    }


def wait_ready(watches: list[ObjectWatch], wanted: int, timeout: float = 1800) -> float:
    """Waits until every watch sees `wanted` Ready objects; returns when the last turned Ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for each in watches:
            each.check()
        if all(len(each.ready) >= wanted for each in watches):
            return max(each.last_ready for each in watches)
        time.sleep(0.05)
    counts = ", ".join(f"{each.plural} {len(each.ready)}/{wanted}" for each in watches)
    raise TimeoutError(f"not all Ready within {timeout:.0f} s ({counts})")


@contextmanager
def watching(watches: list[ObjectWatch]) -> Iterator[list[ObjectWatch]]:
    try:
        yield watches
    finally:
        for each in watches:
            each.stop()
