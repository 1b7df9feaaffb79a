"""Small helpers shared by the integration tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from jetstream_devtools.crds import (
    BINDING_KIND,
    POLICY_KIND,
    apply_policies,
    stream_policy_in_effect,
    wait_policies_in_effect,
)
from jetstream_operator import GROUP, VERSION
from jetstream_operator.api.crdgen import all_policies, policy_for
from jetstream_operator.api.kinds import STREAM, ResourceKind
from tests.support.operator import new_client as new_client

T = TypeVar("T")

DRIFT_REPAIRED_WITHIN = 10.0
"""Seconds within which a test expects drift made on the server to be repaired, through its
advisory or the next resync (every 2 s in the tests). Tests check that it is repaired, not
how fast: that is the benchmark's drift figure (p99 in milliseconds), and a 2 s bound here
failed on a loaded machine."""


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout: float = 30.0, interval: float = 0.2
) -> T:
    """Poll until the probe returns something truthy; fail with its last answer otherwise."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            answer = await probe()
        except AssertionError as error:
            last = error
        else:
            if answer:
                return answer
            last = answer
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s; last: {last!r}")
        await asyncio.sleep(interval)


def json_body(value: object) -> dict[str, Any]:
    """A custom object or listing as the API server sent it; the client types it `object`."""
    return cast(dict[str, Any], value)


class Described(Protocol):
    @property
    def metadata(self) -> client.V1ObjectMeta | None: ...


def present(value: T | None) -> T:
    """A field the API server always sends, though its model allows None."""
    assert value is not None
    return value


def name_of(item: Described) -> str:
    return present(present(item.metadata).name)


@contextmanager
def policies_out_of_effect(
    api_client: client.ApiClient, kinds: list[ResourceKind] | None = None
) -> Iterator[None]:
    """The kinds' admission policies (every kind's by default) out of effect, as on a cluster
    without them: their bindings are removed, and put back on return. Tests run one at a time,
    so no other test sees the gap."""
    policies = all_policies() if kinds is None else [p for k in kinds for p in policy_for(k)]
    admission = client.AdmissionregistrationV1Api(api_client)
    for item in policies:
        if item["kind"] == BINDING_KIND:
            admission.delete_validating_admission_policy_binding(item["metadata"]["name"])
    try:
        deadline = time.monotonic() + 30
        while (kinds is None or STREAM in kinds) and stream_policy_in_effect(api_client):
            assert time.monotonic() < deadline, "the Stream policy refuses without its binding"
            time.sleep(0.2)
        yield
    finally:
        apply_policies(api_client, policies)
        wait_policies_in_effect(api_client)


class Resources:
    """Custom objects of our group in one namespace, through the real API server."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.namespace = namespace

    def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", **body}
        # Strict field validation, as kubectl applies it: unknown fields are errors.
        return json_body(
            self.api.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, plural, body, field_validation="Strict"
            )
        )

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        try:
            result = json_body(
                self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return result

    def patch_spec(self, plural: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return json_body(
            self.api.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                plural,
                name,
                {"spec": spec},
                field_validation="Strict",
            )
        )

    def replace(self, plural: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Write the whole object, as `kubectl replace` does: what `body` lacks is gone."""
        return json_body(
            self.api.replace_namespaced_custom_object(
                GROUP, VERSION, self.namespace, plural, name, body, field_validation="Strict"
            )
        )

    def annotate(self, plural: str, name: str, annotations: dict[str, str | None]) -> None:
        """Set annotations (None removes one), as `kubectl annotate` does."""
        self.api.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, plural, name, {"metadata": {"annotations": annotations}}
        )

    def label(self, plural: str, name: str, labels: dict[str, str | None]) -> None:
        """Set labels (None removes one), as `kubectl label` does."""
        self.api.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, plural, name, {"metadata": {"labels": labels}}
        )

    def delete(self, plural: str, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)


def stream_manifest(name: str, stream: str, **spec: Any) -> dict[str, Any]:
    """A Stream resource named `name` for NATS stream `stream`, on subjects `<stream>.>`."""
    return {
        "kind": "Stream",
        "metadata": {"name": name},
        "spec": {"name": stream, "subjects": [f"{stream.lower()}.>"], **spec},
    }


AUTHENTICATION = ("userPassword", "token", "nkey", "creds")


def nats_connection(name: str, servers: list[str], **spec: Any) -> dict[str, Any]:
    """A NatsConnection manifest. With credentials it allows plain text: the suite's servers
    listen on loopback without TLS."""
    plaintext = any(key in spec for key in AUTHENTICATION) and "tls" not in spec
    return {
        "kind": "NatsConnection",
        "metadata": {"name": name},
        "spec": {"servers": servers, **({"allowPlaintext": True} if plaintext else {}), **spec},
    }


def condition(resource: dict[str, Any] | None, kind: str = "Ready") -> dict[str, Any]:
    """One condition of a resource's status, or an empty dict."""
    for item in ((resource or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return {}


def is_ready(resource: dict[str, Any] | None) -> bool:
    ready = condition(resource)
    generation = (resource or {}).get("metadata", {}).get("generation")
    return ready.get("status") == "True" and ready.get("observedGeneration") == generation


def fill(value: Any, names: dict[str, str]) -> Any:
    """Replace {placeholders} in every string of a nested structure."""
    if isinstance(value, str):
        for key, name in names.items():
            value = value.replace("{" + key + "}", name)
        return value
    if isinstance(value, dict):
        return {key: fill(item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [fill(item, names) for item in value]
    return value


def is_subset(expected: Any, actual: Any) -> bool:
    """Whether every key of `expected`, at every depth, has the same value in `actual`."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            is_subset(value, actual.get(key)) for key, value in expected.items()
        )
    return bool(expected == actual)


def warnings(api_client: client.ApiClient, namespace: str, name: str | None = None) -> list[str]:
    """The reasons of the Warning events in the namespace, about one object if named."""
    events = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
    return [
        str(event.reason)
        for event in events
        if event.type == "Warning" and (name is None or event.involved_object.name == name)
    ]


async def event_posted(
    api_client: client.ApiClient, namespace: str, name: str, reason: str, timeout: float = 15.0
) -> Any:
    """The first Event of `reason` about the object, once posted: the operator posts Events
    after the status writes they tell of, so one can come a moment after what it reports."""

    async def found() -> Any:
        events = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
        matching = [e for e in events if e.reason == reason and e.involved_object.name == name]
        return matching[0] if matching else None

    return await eventually(found, timeout=timeout)


OUR_PLURALS = ("natsusers", "consumers", "streams", "keyvalues", "objectstores", "natsconnections")
"""Our kinds, the users of a stream first: they are deleted in this order."""

FINALIZED_WITHIN = 15.0
"""Seconds a test's leftovers get from the operator to be finalized at its end."""


def empty_namespace(
    api_client: client.ApiClient, namespace: str, timeout: float = FINALIZED_WITHIN
) -> list[str]:
    """Delete a test's objects of our kinds and wait until the operator has finalized them,
    so the next test on this worker starts on servers that hold nothing of this one (the
    operator keeps no resources of earlier tests, and their deletions are not counted in the
    next test's figures). Objects still there after `timeout` (a deletion the test blocked,
    an operator that no longer serves the namespace) lose their finalizers, so the API server
    forgets them; what they made in NATS stays. Returns what was left, as `plural/name`."""
    api = client.CustomObjectsApi(api_client)
    deadline = time.monotonic() + timeout

    def present() -> list[tuple[str, str]] | None:
        """Our objects in the namespace; None while the API server cannot list them (its
        CRDs not served yet, after a test restarted it)."""
        found = []
        try:
            for plural in OUR_PLURALS:
                listed = json_body(
                    api.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
                )
                found += [(plural, str(item["metadata"]["name"])) for item in listed["items"]]
        except ApiException as error:
            if error.status not in (404, 503):
                raise
            return None
        return found

    def each(call: Callable[[str, str], object], objects: list[tuple[str, str]]) -> None:
        for plural, name in objects:
            try:
                call(plural, name)
            except ApiException as error:
                if error.status != 404:
                    raise

    left = present()
    while left is None and time.monotonic() < deadline:
        time.sleep(0.5)
        left = present()
    if left is None:
        return []  # nothing can be listed: nothing is left to delete through this server
    each(
        lambda plural, name: api.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name
        ),
        left,
    )
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = present() or []
    each(
        lambda plural, name: api.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name, {"metadata": {"finalizers": None}}
        ),
        left,
    )
    return [f"{plural}/{name}" for plural, name in left]


async def refused_with(
    resources: Resources, plural: str, name: str, reason: str, timeout: float = 30
) -> str:
    """The Ready condition's message, once its reason is `reason`."""

    async def shown() -> str | None:
        ready = condition(resources.get(plural, name))
        return str(ready.get("message")) if ready.get("reason") == reason else None

    return await eventually(shown, timeout=timeout)


def patch_spec_past_admission(
    resources: Resources, plural: str, name: str, patch: dict[str, Any]
) -> None:
    """Patch the spec; the policies leave the API server's caches a moment after their
    bindings, so a refusal by a policy is tried again for a few seconds."""
    deadline = time.monotonic() + 15
    while True:
        try:
            resources.patch_spec(plural, name, patch)
            return
        except ApiException as error:
            if POLICY_KIND not in str(error.body) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
