"""The in-memory JetStream the handler and drift tests share, and the glue around them.

FakeJetStream answers like the server where it matters here: it keeps some values of its own,
and counts every request. RecordingWriter stands in for status writes and events. The tests
here check the pieces the handlers and drift repair are wired through: the connection directory,
what the registry keeps, and how a stream ref of another deployment is reported. The handler
passes are in test_handler_passes.py and the drift resyncs in test_drift_resync.py; that the real
server behaves this way is tested against nats-server in tests/integration.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from jetstream_operator.handlers import consumer as consumer_handlers
from jetstream_operator.handlers.connection_directory import ConnectionDirectory, ConnectionNotReady
from jetstream_operator.handlers.failures import FailureMemory
from jetstream_operator.handlers.registry import ResourceRegistry
from jetstream_operator.handlers.status_writes import StatusBudget
from jetstream_operator.nats.jsapi import JetStreamApi, JetStreamError, StreamListing
from jetstream_operator.nats.jsz import AccountMonitoring
from jetstream_operator.nats.pool import ConnectionTarget
from jetstream_operator.reconcile.backed import STREAM_KIND
from jetstream_operator.reconcile.conditions import Outcome, conditions_for
from jetstream_operator.reconcile.ownership import Owner
from jetstream_operator.triggers.drift import DriftWatcher, WatchSettings

OWNER = Owner("ns", "orders", "uid-1")


class FakeJetStream:
    """Streams by name; `forced` values are kept whatever an update asks for."""

    def __init__(self, forced: dict[str, Any] | None = None) -> None:
        self.streams: dict[str, dict[str, Any]] = {}
        self.forced = forced or {}
        self.requests: list[str] = []
        self.refuse: str | None = None
        self.on_consumer_listing: Callable[[], Awaitable[None]] | None = None
        self.consumer_counts: dict[str, int] = {}
        self.after_listing: Callable[[], Awaitable[None]] | None = None
        self.cluster: dict[str, Any] | None = None
        self.unseen: set[str] = set()
        self.consumers: dict[tuple[str, str], dict[str, Any]] = {}
        self.now = "2026-01-01T00:00:00Z"
        self.made_at: dict[str, str] = {}

    def _info(self, name: str) -> dict[str, Any]:
        info = {
            "config": copy.deepcopy(self.streams[name]),
            "state": {"messages": 0, "consumer_count": self.consumer_counts.get(name, 0)},
            "created": self.made_at.get(name, "2026-01-01T00:00:00Z"),
            "ts": self.now,
        }
        return info if self.cluster is None else {**info, "cluster": self.cluster}

    async def stream_info(self, name: str) -> dict[str, Any] | None:
        self.requests.append(f"INFO {name}")
        return self._info(name) if name in self.streams else None

    async def _store(self, operation: str, config: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(f"{operation} {config['name']}")
        if self.refuse:
            raise JetStreamError(400, 10052, self.refuse)
        name, stored = config["name"], {**config, **self.forced}
        if operation == "CREATE" and name in self.streams:
            if self.streams[name] != stored:
                raise JetStreamError(400, 10058, "stream name already in use")
            return self._info(name)  # an identical create is answered with what is there
        self.streams[name] = stored
        self.made_at[name] = self.now
        return self._info(name)

    async def create_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        return await self._store("CREATE", config)

    async def update_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        return await self._store("UPDATE", config)

    async def delete_stream(self, name: str) -> None:
        self.requests.append(f"DELETE {name}")
        del self.streams[name]

    async def stream_listing(self) -> StreamListing:
        """As a cluster lists: a stream in `unseen` comes with an empty state."""
        self.requests.append("LIST")
        listed = [
            {**self._info(name), "state": {}} if name in self.unseen else self._info(name)
            for name in self.streams
        ]
        if self.after_listing is not None:
            hook, self.after_listing = self.after_listing, None
            await hook()  # what happens while the listing is on its way
        return StreamListing(listed, {name: "" for name in self.unseen})

    def _consumer_info(self, stream: str, name: str) -> dict[str, Any]:
        return {
            "stream_name": stream,
            "name": name,
            "config": copy.deepcopy(self.consumers[(stream, name)]),
            "created": "2026-01-01T00:00:00Z",
            "ts": self.now,
        }

    async def consumer_info(self, stream: str, name: str) -> dict[str, Any] | None:
        self.requests.append(f"CONSUMER.INFO {stream} {name}")
        return self._consumer_info(stream, name) if (stream, name) in self.consumers else None

    async def create_consumer(self, stream: str, body: dict[str, Any]) -> dict[str, Any]:
        """Action "create" as the server takes it: what is there must be identical."""
        config = body["config"]
        name = config["name"]
        self.requests.append(f"CONSUMER.CREATE {stream} {name}")
        if stream not in self.streams:
            raise JetStreamError(404, 10059, "stream not found")
        held = self.consumers.get((stream, name))
        if held is not None and (body["action"] == "update" or held == config):
            self.consumers[(stream, name)] = config
        elif held is not None:
            raise JetStreamError(400, 10148, "consumer already exists")
        else:
            self.consumers[(stream, name)] = config
        return self._consumer_info(stream, name)

    def sent(self, operation: str) -> int:
        return sum(1 for request in self.requests if request.startswith(operation))

    async def list_consumers(self, stream: str) -> list[dict[str, Any]]:
        self.requests.append(f"CONSUMERS {stream}")
        if self.on_consumer_listing is not None:
            await self.on_consumer_listing()
            self.on_consumer_listing = None
        return []


def as_api(server: FakeJetStream) -> JetStreamApi:
    """The fake where the handlers take the real API: it answers every request they make."""
    return server  # type: ignore[return-value]  # a stand-in, not a subclass


class RecordingWriter:
    def __init__(self, failing: set[str] | None = None) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.events: list[tuple[str, str, str]] = []
        self.failing = failing or set()

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        if name in self.failing:
            raise RuntimeError(f"API server refused {name}")
        self.patches.append((name, status))
        return True

    def post(self, body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """As EventPoster.post, recorded at once."""
        self.events.append((body["metadata"]["name"], event_type, reason))


def stream_body(name: str, uid: str, spec: dict[str, Any], **status: Any) -> dict[str, Any]:
    ready = conditions_for(Outcome(True, "Synced", f"stream {spec['name']} matches the spec"), 1)
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": uid, "generation": 1},
        "spec": spec,
        "status": {"conditions": ready, "observedGeneration": 1, **status},
    }


def watcher(
    streams: ResourceRegistry,
    writer: RecordingWriter,
    memory: FailureMemory,
    consumers: ResourceRegistry | None = None,
    monitoring: AccountMonitoring | None = None,
) -> DriftWatcher:
    return DriftWatcher(
        {STREAM_KIND: streams},
        consumers if consumers is not None else ResourceRegistry(),
        pool=None,  # type: ignore[arg-type]  # resync() is called with the JetStream directly
        target=ConnectionTarget(("nats://127.0.0.1:4222",)),
        writer=writer,  # type: ignore[arg-type]
        events=writer,
        settings=WatchSettings(resync_interval=30),
        failures=memory,
        budget=StatusBudget(),
        monitoring=monitoring,
    )


async def test_the_directory_explains_a_missing_or_required_connection() -> None:
    default = ConnectionTarget(("nats://127.0.0.1:4222",))
    directory = ConnectionDirectory(default, ResourceRegistry(), None, None)  # type: ignore[arg-type]
    assert await directory.target_for("ns", {}) is default
    with pytest.raises(ConnectionNotReady) as missing:
        await directory.target_for("ns", {"connectionRef": "tenant"})
    assert missing.value.reason == "ConnectionNotFound"
    strict = ConnectionDirectory(default, ResourceRegistry(), None, None, require_reference=True)  # type: ignore[arg-type]
    with pytest.raises(ConnectionNotReady) as required:
        await strict.target_for("ns", {})
    assert required.value.reason == "ConnectionRequired"
    remembered = ConnectionTarget(("nats://127.0.0.1:4223",))
    assert directory.remember(("ns", "tenant"), remembered)
    assert not directory.remember(("ns", "tenant"), remembered)
    assert await directory.target_for("ns", {"connectionRef": "tenant"}) is remembered
    assert directory.known() == {None: default, ("ns", "tenant"): remembered}


async def test_a_reading_directory_follows_the_namespace_of_a_connection_it_does_not_know() -> None:
    """Where kopf does not watch NatsConnections, a miss asks to follow the namespace first;
    a namespace whose listing failed is a transient trouble, not a missing connection."""
    default = ConnectionTarget(("nats://127.0.0.1:4222",))
    followed: list[str] = []

    async def follow(namespace: str) -> bool:
        followed.append(namespace)
        return namespace != "unreadable"

    directory = ConnectionDirectory(default, ResourceRegistry(), None, None, follow=follow)  # type: ignore[arg-type]
    with pytest.raises(ConnectionNotReady) as missing:
        await directory.target_for("ns", {"connectionRef": "tenant"})
    assert missing.value.reason == "ConnectionNotFound"
    with pytest.raises(ConnectionNotReady) as unread:
        await directory.target_for("unreadable", {"connectionRef": "tenant"})
    assert unread.value.reason == "ConnectionNotReady"
    assert "could not be read yet" in str(unread.value)
    remembered = ConnectionTarget(("nats://127.0.0.1:4223",))
    directory.remember(("ns", "tenant"), remembered)
    assert await directory.target_for("ns", {"connectionRef": "tenant"}) is remembered
    assert followed == ["ns", "unreadable"]  # a known connection asks for nothing


def test_the_registry_keeps_only_what_drift_repair_reads() -> None:
    registry = ResourceRegistry()
    body = {
        "apiVersion": "jetstream-operator.io/v1alpha1",
        "kind": "Stream",
        "metadata": {
            "namespace": "ns",
            "name": "orders",
            "uid": "u1",
            "generation": 3,
            "managedFields": [{"manager": "kubectl"}] * 20,
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{...}" * 100,
                "kopf.jetstream-operator.io/last-handled": "{}",
                "jetstream-operator.io/paused": "true",
            },
        },
        "spec": {"name": "ORDERS"},
        "status": {"messages": 4, "lastHandledConfiguration": "{...}" * 100},
    }
    registry.observe("ADDED", body)
    kept = registry.named("ns", "orders")
    assert kept is not None
    assert kept.body == {
        "metadata": {
            "namespace": "ns",
            "name": "orders",
            "uid": "u1",
            "generation": 3,
            "annotations": {"jetstream-operator.io/paused": "true"},
        },
        "spec": {"name": "ORDERS"},
        "status": {"messages": 4},
    }
    assert kept.annotation("jetstream-operator.io/paused") == "true" and kept.generation == 3


async def test_a_stream_ref_of_another_deployment_says_so() -> None:
    """With a label selector, the Stream a Consumer names may be another deployment's: the
    message says so when the read finds it, and stays as it was when it finds nothing."""
    spec = {"durableName": "worker", "streamRef": "orders"}
    jetstream = as_api(FakeJetStream())
    asked: list[str] = []

    def explaining(answer: str | None) -> Callable[[str], Awaitable[str | None]]:
        async def unresolved_ref(stream: str) -> str | None:
            asked.append(stream)
            return answer

        return unresolved_ref

    plain = await consumer_handlers.reconcile(spec, OWNER, jetstream, stream_name=None)
    missing = await consumer_handlers.reconcile(
        spec, OWNER, jetstream, stream_name=None, unresolved_ref=explaining(None)
    )
    elsewhere = consumer_handlers.served_elsewhere("orders", {"shard": "b"}, "shard=a")
    sharded = await consumer_handlers.reconcile(
        spec, OWNER, jetstream, stream_name=None, unresolved_ref=explaining(elsewhere)
    )
    assert asked == ["orders", "orders"]
    assert plain.outcome.reason == missing.outcome.reason == sharded.outcome.reason
    assert plain.outcome.reason == "StreamNotFound"
    assert missing.outcome.message == plain.outcome.message
    assert sharded.outcome.message == elsewhere
    assert elsewhere is not None and "selector 'shard=a'" in elsewhere
    assert "give the consumer the labels of its stream" in elsewhere.lower()


def test_a_stream_the_selector_takes_is_not_called_another_deployments() -> None:
    """It exists and matches: its watch event is on its way, and the plain message holds."""
    assert consumer_handlers.served_elsewhere("orders", {"shard": "a"}, "shard in (a,c)") is None
    assert consumer_handlers.served_elsewhere("orders", {}, "shard in (a,c)") is not None
