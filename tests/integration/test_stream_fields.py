"""Every Stream spec field reaches the real nats-server, and admission refuses what it must."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from nats.aio.client import Client

from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import Resources, eventually, fill, is_ready, is_subset

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]

# spec fragment -> fragment expected in the server's config (ORIGIN is created first).
FIELD_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("description", {"description": "orders"}, {"description": "orders"}),
    ("retention", {"retention": "interest"}, {"retention": "interest"}),
    ("storage", {"storage": "memory"}, {"storage": "memory"}),
    ("maxConsumers", {"maxConsumers": 5}, {"max_consumers": 5}),
    ("maxMsgs", {"maxMsgs": 11}, {"max_msgs": 11}),
    ("maxBytes", {"maxBytes": 2048}, {"max_bytes": 2048}),
    ("maxAge", {"maxAge": "90s"}, {"max_age": 90_000_000_000}),
    ("maxMsgSize", {"maxMsgSize": 512}, {"max_msg_size": 512}),
    ("maxMsgsPerSubject", {"maxMsgsPerSubject": 3}, {"max_msgs_per_subject": 3}),
    ("discard", {"discard": "new"}, {"discard": "new"}),
    (
        "discardPerSubject",
        {"discard": "new", "maxMsgsPerSubject": 2, "discardPerSubject": True},
        {"discard_new_per_subject": True},
    ),
    ("duplicateWindow", {"duplicateWindow": "30s"}, {"duplicate_window": 30_000_000_000}),
    ("noAck", {"noAck": True}, {"no_ack": True}),
    ("compression", {"compression": "s2"}, {"compression": "s2"}),
    ("firstSequence", {"firstSequence": 100}, {"first_seq": 100}),
    (
        "subjectTransform",
        {"subjectTransform": {"source": "{s}.*", "dest": "moved.{{wildcard(1)}}"}},
        {"subject_transform": {"src": "{s}.*", "dest": "moved.{{wildcard(1)}}"}},
    ),
    (
        "republish",
        {"republish": {"source": ">", "destination": "copy.>", "headersOnly": True}},
        {"republish": {"src": ">", "dest": "copy.>", "headers_only": True}},
    ),
    (
        "republish headers_only (NACK spelling)",
        {"republish": {"destination": "copy2.>", "headers_only": True}},
        {"republish": {"src": ">", "dest": "copy2.>", "headers_only": True}},
    ),
    ("denyDelete", {"denyDelete": True}, {"deny_delete": True}),
    ("denyPurge", {"denyPurge": True}, {"deny_purge": True}),
    ("allowRollup", {"allowRollup": True}, {"allow_rollup_hdrs": True}),
    ("allowDirect", {"allowDirect": True}, {"allow_direct": True}),
    ("allowMsgTtl", {"allowMsgTtl": True}, {"allow_msg_ttl": True}),
    (
        "subjectDeleteMarkerTtl",
        {"allowMsgTtl": True, "allowRollup": True, "subjectDeleteMarkerTtl": "5s"},
        {"subject_delete_marker_ttl": 5_000_000_000},
    ),
    ("allowMsgCounter", {"allowMsgCounter": True}, {"allow_msg_counter": True}),
    ("allowAtomicPublish", {"allowAtomicPublish": True}, {"allow_atomic": True}),
    ("allowMsgSchedules", {"allowMsgSchedules": True}, {"allow_msg_schedules": True}),
    ("persistMode", {"persistMode": "async"}, {"persist_mode": "async"}),
    (
        "consumerLimits",
        {"consumerLimits": {"inactiveThreshold": "1m", "maxAckPending": 100}},
        {"consumer_limits": {"inactive_threshold": 60_000_000_000, "max_ack_pending": 100}},
    ),
    ("metadata", {"metadata": {"team": "payments"}}, {"metadata": {"team": "payments"}}),
    (
        "mirror",
        {
            "subjects": [],
            "mirror": {
                "name": "{origin}",
                "optStartSeq": 2,
                "subjectTransforms": [{"source": "{o}.>", "dest": "m.>"}],
            },
        },
        {
            "mirror": {
                "name": "{origin}",
                "opt_start_seq": 2,
                "subject_transforms": [{"src": "{o}.>", "dest": "m.>"}],
            }
        },
    ),
    (
        "sources",
        {
            "sources": [
                {
                    "name": "{origin}",
                    "filterSubject": "{o}.a",
                    "externalApiPrefix": "$JS.hub.API",
                    "externalDeliverPrefix": "deliver.src",
                }
            ]
        },
        {
            "sources": [
                {
                    "name": "{origin}",
                    "filter_subject": "{o}.a",
                    "external": {"api": "$JS.hub.API", "deliver": "deliver.src"},
                }
            ]
        },
    ),
]


@pytest.mark.parametrize(
    ("field", "fragment", "expected"), FIELD_CASES, ids=[c[0] for c in FIELD_CASES]
)
async def test_field_round_trips_to_the_server(
    resources: Resources,
    nc: Client,
    namespace: str,
    field: str,
    fragment: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    base = namespace.replace("-", "_").upper()
    names = {"s": f"{base.lower()}.in", "origin": f"{base}_ORIGIN", "o": f"{base.lower()}.origin"}
    jetstream = JetStreamApi(nc)
    if "{origin}" in str(fragment):
        resources.create(
            "streams",
            {
                "kind": "Stream",
                "metadata": {"name": "origin"},
                "spec": {"name": names["origin"], "subjects": [f"{names['o']}.>"]},
            },
        )
        await eventually(lambda: jetstream.stream_info(names["origin"]))
    spec = {"name": base, "subjects": [f"{names['s']}.*"], **fill(fragment, names)}
    resources.create("streams", {"kind": "Stream", "metadata": {"name": "subject"}, "spec": spec})
    want = fill(expected, names)

    async def matches() -> bool:
        info = await jetstream.stream_info(base)
        return info is not None and is_subset(want, info["config"])

    await eventually(matches, timeout=20)

    async def ready() -> bool:
        return is_ready(resources.get("streams", "subject"))

    await eventually(ready, timeout=20)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "RENAMED"}, "spec.name is immutable"),
        ({"storage": "memory"}, "spec.storage cannot change"),
        ({"retention": "workqueue"}, "to or from workqueue"),
        ({"firstSequence": 5}, "firstSequence applies only"),
    ],
)
def test_immutable_change_is_refused_at_admission(
    resources: Resources, namespace: str, change: dict[str, Any], message: str
) -> None:
    base = namespace.replace("-", "_").upper()
    resources.create(
        "streams", {"kind": "Stream", "metadata": {"name": "fixed"}, "spec": {"name": base}}
    )
    with pytest.raises(ApiException) as refused:
        resources.patch_spec("streams", "fixed", change)
    assert refused.value.status == 422
    assert message in (refused.value.body or "")


def test_a_flag_that_cannot_be_turned_off_is_refused_naming_its_field(
    resources: Resources, namespace: str
) -> None:
    """The rule is in the Stream's admission policy (api/policygen.py), whose refusals carry no
    field path: the message names spec.denyDelete itself."""
    base = namespace.replace("-", "_").upper()
    spec = {"name": base, "denyDelete": True}
    resources.create("streams", {"kind": "Stream", "metadata": {"name": "kept"}, "spec": spec})
    resources.patch_spec("streams", "kept", {"denyDelete": True, "maxMsgs": 10})  # unchanged: fine
    with pytest.raises(ApiException) as refused:
        resources.patch_spec("streams", "kept", {"denyDelete": False})
    assert refused.value.status == 422
    body = json.loads(refused.value.body or "{}")
    assert body["reason"] == "Invalid"
    assert [cause["message"] for cause in body["details"]["causes"]] == [
        "ValidatingAdmissionPolicy 'streams.jetstream-operator.io' with binding "
        "'streams.jetstream-operator.io' denied request: "
        "spec.denyDelete cannot be turned off once on"
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "bad.name"}, "spec.name"),
        ({"name": "X", "maxAge": "1 day"}, "spec.maxAge"),
        ({"name": "X", "replicas": 7}, "spec.replicas"),
        ({"name": "X", "storage": "disk"}, "spec.storage"),
        ({"name": "X", "discardPerSubject": True}, "discardPerSubject needs discard: new"),
        (
            {"name": "X", "subjects": ["a"], "mirror": {"name": "Y"}},
            "a mirror takes its subjects from the origin",
        ),
        ({"name": "X", "maxMessages": 5}, "maxMessages"),
    ],
)
def test_bad_spec_is_refused_at_admission(
    resources: Resources, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as refused:
        resources.create("streams", {"kind": "Stream", "metadata": {"name": "bad"}, "spec": spec})
    assert refused.value.status in (400, 422), refused.value.body
    assert message in (refused.value.body or "")
