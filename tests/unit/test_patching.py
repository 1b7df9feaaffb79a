"""kopf's remainder of a patch, made cheaper, gives the operations kopf's own gives."""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kopf._cogs.structs import finalizers, patches

from jetstream_operator.kopf_adaptations import LIGHTER_PATCH_REMAINDERS
from jetstream_operator.patching import changed_fields_diff, same_json

FINALIZER = "jetstream-operator.io/finalizer"

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from([0.0, 1.0]),
    st.text("ab", max_size=2),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text("xyz", max_size=1), inner, max_size=3)
    ),
    max_leaves=8,
)
bodies = st.dictionaries(
    st.sampled_from(["metadata", "spec", "status", "kind"]), values, max_size=4
)


@settings(max_examples=300, deadline=None)
@given(bodies, bodies, st.data())
def test_the_same_operations_as_diffing_the_whole_bodies(
    before: dict[str, Any], other: dict[str, Any], data: st.DataObject
) -> None:
    # Bodies that share some fields, as a body and its patched copy do.
    shared = data.draw(st.sets(st.sampled_from(sorted(before)))) if before else set()
    after = {**other, **{key: copy.deepcopy(before[key]) for key in shared}}
    assert changed_fields_diff(before, after) == jsonpatch.JsonPatch.from_diff(before, after).patch


def test_values_python_takes_as_equal_stay_in_the_diff() -> None:
    assert not same_json(1, True)
    assert not same_json({"a": 1.0}, {"a": 1})
    assert same_json({"a": [1, "b"]}, {"a": [1, "b"]})
    assert changed_fields_diff({"spec": {"a": 1}}, {"spec": {"a": True}}) == [
        {"op": "replace", "path": "/spec/a", "value": True}
    ]


@pytest.fixture
def lightened() -> Iterator[None]:
    original = patches.Patch.as_json_patch
    try:
        assert LIGHTER_PATCH_REMAINDERS.apply()
        assert LIGHTER_PATCH_REMAINDERS.apply()  # twice replaces once
        assert patches.Patch.as_json_patch is not original
        yield
    finally:
        patches.Patch.as_json_patch = original  # type: ignore[method-assign]


BODY: dict[str, Any] = {
    "apiVersion": "jetstream-operator.io/v1beta2",
    "metadata": {"name": "orders", "finalizers": [FINALIZER], "resourceVersion": "7"},
    "spec": {"name": "orders", "subjects": ["orders.>"]},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


def remainders() -> list[patches.Patch]:
    """What kopf leaves of its patches: nothing, a finalizer's removal or addition, and one
    with merge-patch content besides."""
    allow = functools.partial(finalizers.allow_deletion, finalizer=FINALIZER)
    block = functools.partial(finalizers.block_deletion, finalizer="other.io/finalizer")
    return [
        patches.Patch(body=BODY),  # type: ignore[arg-type]
        patches.Patch(fns=[allow]),
        patches.Patch(fns=[block]),
        patches.Patch({"status": {"phase": None, "extra": 1}}, fns=[allow]),
    ]


def test_kopfs_own_operations_for_what_kopf_leaves() -> None:
    expected = [patch.as_json_patch(BODY) for patch in remainders()]  # type: ignore[arg-type]
    original = patches.Patch.as_json_patch
    try:
        assert LIGHTER_PATCH_REMAINDERS.apply()
        assert [patch.as_json_patch(BODY) for patch in remainders()] == expected  # type: ignore[arg-type]
    finally:
        patches.Patch.as_json_patch = original  # type: ignore[method-assign]
    assert expected[0] == []
    assert expected[1] == [{"op": "remove", "path": "/metadata/finalizers"}]


def test_nothing_left_is_not_copied(lightened: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("copied")

    monkeypatch.setattr(copy, "deepcopy", refuse)
    assert patches.Patch(body=BODY).as_json_patch() == []  # type: ignore[arg-type]
    assert patches.Patch().as_json_patch(BODY) == []  # type: ignore[arg-type]


def test_without_a_body_kopfs_error_stays(lightened: None) -> None:
    with pytest.raises(ValueError, match="original body"):
        patches.Patch({"spec": {"a": 1}}).as_json_patch()
