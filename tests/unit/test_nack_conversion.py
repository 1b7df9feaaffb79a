"""NACK conversion as pure logic: NACK manifests in, our manifests out, with NACK's defaults made
explicit and kinds without a counterpart refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from jetstream_operator.api.connection import NatsConnectionSpec
from jetstream_operator.cli import main
from jetstream_operator.export.nack import convert_documents

from .test_export import S

NACK_STREAM = {
    "apiVersion": "jetstream.nats.io/v1beta2",
    "kind": "Stream",
    "metadata": {
        "name": "orders",
        "namespace": "apps",
        "labels": {"team": "a"},
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
    },
    # As stored by the API server with NACK's CRD defaults filled in, storage left out.
    "spec": {
        "name": "ORDERS",
        "subjects": ["orders.*"],
        "retention": "limits",
        "maxConsumers": -1,
        "maxMsgs": -1,
        "maxBytes": -1,
        "maxAge": "",
        "maxMsgsPerSubject": 0,
        "discard": "old",
        "compression": "",
        "firstSequence": 0,
        "replicas": 1,
        "servers": ["nats://nats:4222"],
        "creds": "",
        "preventDelete": False,
    },
}
NACK_CONSUMER = {
    "apiVersion": "jetstream.nats.io/v1beta2",
    "kind": "Consumer",
    "metadata": {"name": "worker"},
    "spec": {"durableName": "worker", "streamName": "ORDERS", "priorityPolicy": ""},
}
NACK_TEMPLATE = {
    "apiVersion": "jetstream.nats.io/v1beta2",
    "kind": "StreamTemplate",
    "metadata": {"name": "tpl"},
    "spec": {"name": "TPL"},
}


def test_nack_defaults_are_made_explicit() -> None:
    conversion = convert_documents([NACK_STREAM, NACK_CONSUMER])
    stream, consumer = conversion.manifests
    assert stream["apiVersion"] == "jetstream-operator.io/v1alpha1"
    assert stream["metadata"] == {"name": "orders", "namespace": "apps", "labels": {"team": "a"}}
    assert stream["spec"] == {
        "name": "ORDERS",
        "subjects": ["orders.*"],
        "retention": "limits",
        "maxConsumers": -1,
        "maxMsgs": -1,
        "maxBytes": -1,
        "discard": "old",
        "replicas": 1,
        "preventDelete": False,
        "storage": "memory",
        "adoption": "IfUnowned",
    }
    assert consumer["spec"] == {
        "durableName": "worker",
        "streamName": "ORDERS",
        "ackPolicy": "none",
        "ackWait": "1ns",
        "adoption": "IfUnowned",
    }
    notes = "\n".join(conversion.notes)
    assert "Stream apps/orders: spec.servers left out" in notes
    assert "spec.storage: memory written out" in notes
    assert conversion.refused == []


def test_nack_values_that_are_set_are_kept() -> None:
    stream = {**NACK_STREAM, "spec": {**NACK_STREAM["spec"], "storage": "file"}}  # type: ignore[dict-item]
    consumer = {
        **NACK_CONSUMER,
        "spec": {**NACK_CONSUMER["spec"], "ackPolicy": "explicit", "ackWait": "30s"},  # type: ignore[dict-item]
    }
    converted = convert_documents([{"kind": "List", "items": [stream, consumer]}]).manifests
    assert converted[0]["spec"]["storage"] == "file"
    assert converted[1]["spec"]["ackPolicy"] == "explicit"
    assert converted[1]["spec"]["ackWait"] == "30s"


def nack(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "jetstream.nats.io/v1beta2",
        "kind": kind,
        "metadata": {"name": name, "namespace": "apps"},
        "spec": spec,
    }


# As the API server stores them with NACK's CRD defaults filled in (no storage default).
NACK_CRD_DEFAULTS = {
    "creds": "",
    "nkey": "",
    "servers": [],
    "preventDelete": False,
    "preventUpdate": False,
    "tlsFirst": False,
    "replicas": 1,
}


def test_nack_buckets_convert_with_their_defaults_and_nanoseconds_made_ours() -> None:
    kv = nack(
        "KeyValue",
        "settings",
        {
            **NACK_CRD_DEFAULTS,
            "bucket": "settings",
            "history": 0,
            "maxValueSize": 0,
            "ttl": "",
            "limitMarkerTtl": 90 * S,
            "account": "hub",
            "republish": {"destination": "changes.>"},
        },
    )
    store = nack("ObjectStore", "files", {**NACK_CRD_DEFAULTS, "bucket": "files", "maxBytes": 0})
    conversion = convert_documents([kv, store])
    assert conversion.refused == []
    converted_kv, converted_store = conversion.manifests
    assert converted_kv["kind"] == "KeyValue"
    assert converted_kv["spec"] == {
        "preventDelete": False,
        "preventUpdate": False,
        "replicas": 1,
        "bucket": "settings",
        "limitMarkerTtl": "1m30s",
        "connectionRef": "hub",
        "republish": {"destination": "changes.>"},
        "adoption": "IfUnowned",
    }
    assert converted_store["spec"] == {
        "preventDelete": False,
        "preventUpdate": False,
        "replicas": 1,
        "bucket": "files",
        "adoption": "IfUnowned",
    }
    notes = "\n".join(conversion.notes)
    assert "KeyValue apps/settings: spec.account hub became connectionRef: hub" in notes
    assert "republish" not in notes  # NACK's '>' is ours
    assert "storage" not in notes  # NACK's buckets are file storage, as ours


def test_a_nack_account_becomes_a_nats_connection_reading_the_same_secrets() -> None:
    account = nack(
        "Account",
        "hub",
        {
            "servers": ["nats://nats.nats.svc:4222"],
            "tls": {"secret": {"name": "hub-tls"}, "ca": "ca.crt", "cert": "tls.crt", "key": "k"},
            "creds": {"secret": {"name": "hub-creds"}, "file": "user.creds"},
            "tlsFirst": False,
        },
    )
    conversion = convert_documents([account])
    (connection,) = conversion.manifests
    assert connection["kind"] == "NatsConnection"
    assert connection["metadata"] == {"name": "hub", "namespace": "apps"}
    assert connection["spec"] == {
        "servers": ["nats://nats.nats.svc:4222"],
        "tls": {"secretName": "hub-tls", "caKey": "ca.crt", "certKey": "tls.crt", "keyKey": "k"},
        "creds": {"secretName": "hub-creds", "key": "user.creds"},
    }
    assert "reads Secret hub-creds, hub-tls under the same keys" in conversion.notes[0]
    user = nack(
        "Account",
        "u",
        {
            "servers": ["nats://n:4222"],
            "user": {"secret": {"name": "s"}, "user": "name", "password": "pw"},
        },
    )
    assert convert_documents([user]).manifests[0]["spec"]["userPassword"] == {
        "secretName": "s",
        "usernameKey": "name",
        "passwordKey": "pw",
    }
    # NACK sent the password unencrypted to nats://: the manifest says so, or it is refused.
    plain = convert_documents([user])
    assert plain.manifests[0]["spec"]["allowPlaintext"] is True
    assert any("unencrypted" in note for note in plain.notes)
    no_ca = nack("Account", "sys", {"servers": ["tls://n:4222"], "tls": {"secret": {"name": "t"}}})
    tls = convert_documents([no_ca]).manifests[0]["spec"]["tls"]
    assert tls == {"secretName": "t", "caKey": ""}  # the system CAs, as NACK verified
    spec = NatsConnectionSpec.model_validate({"servers": ["tls://n"], "tls": tls})
    assert spec.tls is not None and spec.tls.ca_key is None


def test_nack_kinds_without_a_counterpart_are_refused_by_name() -> None:
    invalid = {**NACK_CONSUMER, "spec": {"durableName": "a.b", "streamName": "S"}}
    servers = {"servers": ["nats://n:4222"]}
    documents = [
        nack("StreamTemplate", "t", {"name": "T"}),
        invalid,
        {"apiVersion": "v1", "kind": "Secret"},
        nack("Account", "no-servers", {"token": {"secret": {"name": "s"}, "token": "t"}}),
        nack("Account", "mounted", {**servers, "creds": {"file": "/etc/nack/a.creds"}}),
        nack(
            "Account",
            "two",
            {
                **servers,
                "token": {"secret": {"name": "s"}, "token": "t"},
                "nkey": {"secret": {"name": "s"}, "seed": "seed"},
            },
        ),
        nack("KeyValue", "bad", {"bucket": "a.b"}),
    ]
    conversion = convert_documents(documents)
    assert conversion.manifests == []
    assert conversion.refused[0] == (
        "StreamTemplate apps/t: not convertible "
        "(only Stream, Consumer, KeyValue, ObjectStore, Account are)"
    )
    assert "Consumer worker: its spec is not valid here" in conversion.refused[1]
    assert "ignored Secret" in conversion.notes[0]
    assert (
        "Account apps/no-servers: no spec.servers: NACK used its controller's"
        in (conversion.refused[2])
    )
    assert (
        "Account apps/mounted: spec.creds names files mounted in NACK's controller"
        in (conversion.refused[3])
    )
    assert conversion.refused[4] == (
        "Account apps/two: it combines nkey, token; a NatsConnection uses one"
    )
    assert "KeyValue apps/bad: its spec is not valid here" in conversion.refused[5]


def test_from_nack_command_writes_files_and_fails_only_when_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "nack"
    source.mkdir()
    documents = [NACK_STREAM, NACK_CONSUMER, NACK_TEMPLATE]
    (source / "all.yaml").write_text(yaml.safe_dump_all(documents))
    assert main(["export", "--from-nack", str(source)]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in documents] == ["Stream", "Consumer"]
    out = tmp_path / "out"
    assert main(["export", "--from-nack", str(source), "--output-dir", str(out), "--strict"]) == 1
    captured = capsys.readouterr()
    assert "not converted: StreamTemplate tpl" in captured.err
    assert sorted(p.name for p in out.iterdir()) == ["consumer-worker.yaml", "stream-orders.yaml"]
    assert yaml.safe_load((out / "stream-orders.yaml").read_text())["spec"]["storage"] == "memory"
