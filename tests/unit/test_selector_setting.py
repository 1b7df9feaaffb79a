"""JETSTREAM_OPERATOR_SELECTOR: checked at start, added to kopf's lists and watches of the
selected kinds only."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest
from pydantic import ValidationError
from yarl import URL

from jetstream_operator import GROUP
from jetstream_operator.cli import settings_problems
from jetstream_operator.k8s.selection import (
    LabelSelection,
    group_collection,
    label_selector_matches,
    label_selector_problem,
    selected_collection,
)
from jetstream_operator.settings import OperatorSettings

SELECTED = ("streams", "consumers")


@pytest.mark.parametrize(
    "text",
    [
        "shard=a",
        "shard==a",
        "shard!=a",
        "shard = a",
        "shard=",
        "shard in (a,b)",
        "shard notin ( a , b )",
        "shard",
        "!legacy",
        "example.com/shard=a,tier in (gold),!legacy",
        "team_x.y-z=v_1.2-3",
    ],
)
def test_selectors_kube_apiserver_takes_are_taken(text: str) -> None:
    assert label_selector_problem(text) is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("", "empty"),
        ("  ", "empty"),
        ("a,,b", "empty requirement"),
        ("shard=a b", "'shard=a b'"),
        ("shard in ()", "'shard in ()'"),
        ("in (a)", "'in (a)'"),
        ("shard=(a)", "'shard=(a)'"),
        ("x>1", "'x>1'"),
        ("-shard=a", "'-shard=a'"),
        ("shard=" + "v" * 64, "at most 63"),
        ("Example.com/shard=a", "'Example.com/shard=a'"),
    ],
)
def test_bad_selectors_are_refused_naming_the_requirement(text: str, named: str) -> None:
    problem = label_selector_problem(text)
    assert problem is not None and named in problem, problem


def test_the_setting_refuses_a_bad_selector_by_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JETSTREAM_OPERATOR_SELECTOR", "shard in ()")
    with pytest.raises(ValidationError) as raised:
        OperatorSettings()
    message = settings_problems(raised.value)
    assert message.startswith("jetstream-operator: JETSTREAM_OPERATOR_SELECTOR: label selector")
    assert "Value error" not in message
    monkeypatch.setenv("JETSTREAM_OPERATOR_SELECTOR", " shard=a ")
    assert OperatorSettings().selector == "shard=a"
    monkeypatch.delenv("JETSTREAM_OPERATOR_SELECTOR")
    assert OperatorSettings().selector is None


def request(method: str, path: str, query: str = "") -> Any:
    url = URL(f"https://api.example:6443{path}" + (f"?{query}" if query else ""))
    return SimpleNamespace(method=method, url=url)


@pytest.mark.parametrize(
    ("method", "path", "selected"),
    [
        ("GET", f"/apis/{GROUP}/v1alpha1/streams", True),
        ("GET", f"/apis/{GROUP}/v1alpha1/namespaces/team-a/consumers", True),
        ("GET", f"/apis/{GROUP}/v1alpha1/natsconnections", False),
        ("GET", f"/apis/{GROUP}/v1alpha1/namespaces/team-a/streams/streams", False),
        ("GET", f"/apis/{GROUP}/v1alpha1/namespaces/team-a/streams/orders/status", False),
        ("PATCH", f"/apis/{GROUP}/v1alpha1/namespaces/team-a/streams", False),
        ("GET", "/apis/other.io/v1/streams", False),
        ("GET", "/api/v1/namespaces", False),
    ],
)
def test_only_lists_and_watches_of_the_selected_kinds_are_filtered(
    method: str, path: str, selected: bool
) -> None:
    assert selected_collection(request(method, path), SELECTED) is selected


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("shard=a", {"shard": "a"}, True),
        ("shard==a", {"shard": "b"}, False),
        ("shard=a", {}, False),
        ("shard!=a", {}, True),
        ("shard!=a", {"shard": "a"}, False),
        ("shard in (a, b)", {"shard": "b"}, True),
        ("shard in (a,b)", {}, False),
        ("shard notin (a,b)", {}, True),
        ("shard notin (a,b)", {"shard": "a"}, False),
        ("shard", {"shard": ""}, True),
        ("shard", {"other": "a"}, False),
        ("!legacy", {"legacy": "yes"}, False),
        ("!legacy", {}, True),
        ("shard=", {"shard": ""}, True),
        ("example.com/shard=a,!legacy", {"example.com/shard": "a"}, True),
        ("example.com/shard=a,!legacy", {"example.com/shard": "a", "legacy": ""}, False),
    ],
)
def test_labels_match_a_selector_by_the_rules_of_kubernetes(
    selector: str, labels: dict[str, str], matches: bool
) -> None:
    assert label_selector_problem(selector) is None
    assert label_selector_matches(selector, labels) is matches


@pytest.mark.parametrize(
    ("path", "plural"),
    [
        (f"/apis/{GROUP}/v1alpha1/natsconnections", "natsconnections"),
        (f"/apis/{GROUP}/v1alpha1/namespaces/team-a/keyvalues", "keyvalues"),
        (f"/apis/{GROUP}/v1alpha1/namespaces/team-a/streams/orders", None),
        (f"/apis/{GROUP}/v1alpha1/watch/streams/orders", None),
        ("/api/v1/namespaces/team-a/events", None),
    ],
)
def test_the_watch_tap_and_the_selector_read_paths_alike(path: str, plural: str | None) -> None:
    """One parser names the collection for both middlewares: a watch of our kinds is tapped
    for creations exactly when it is a list or watch the selector would filter."""
    assert group_collection(request("GET", path)) == plural


async def test_the_middleware_adds_the_selector_and_keeps_the_watch() -> None:
    seen: list[URL] = []

    async def handler(sent: Any) -> aiohttp.ClientResponse:
        seen.append(sent.url)
        return cast(aiohttp.ClientResponse, None)

    selection = LabelSelection("shard in (a,b)", SELECTED)
    path = f"/apis/{GROUP}/v1alpha1/namespaces/team-a/streams"
    await selection(request("GET", path, "watch=true&resourceVersion=7"), handler)
    await selection(request("PATCH", f"{path}/orders"), handler)
    assert seen[0].query == {
        "watch": "true",
        "resourceVersion": "7",
        "labelSelector": "shard in (a,b)",
    }
    assert "labelSelector" not in seen[1].query
