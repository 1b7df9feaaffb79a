"""`kubectl jetstream`: the operator's resources as a team looks at them.

    kubectl jetstream status [-n NAMESPACE | -A]   each stream with its consumers, lag, readiness
    kubectl jetstream why KIND/NAME [-n NAMESPACE] why a resource is not Ready, and what to do

kubectl finds the `kubectl-jetstream` command on PATH (the package installs it). It reads the
API server with the same login as `jetstream-operator export`: the kubeconfig's context and
its namespace, or a pod's service account. Sizes are shown for people (KiB, MiB, GiB).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import GROUP, VERSION
from .api.kinds import ALL_KINDS
from .export.account import client_login
from .k8s.client import ApiError, KubeApi
from .reasons import explain
from .reconcile.live_state import human_bytes

KINDS = {
    name: kind.plural
    for kind in ALL_KINDS
    if kind.scope == "Namespaced"
    for name in (kind.singular, kind.plural)
}
"""What `why` accepts before the slash, kubectl's way (singular or plural, any case)."""

STREAM_PLURALS = ("streams", "keyvalues", "objectstores")
EVENTS_SHOWN = 5


class PluginError(Exception):
    """Bad input or a missing resource: one line for the user, exit code 1."""


def ready_of(body: Mapping[str, Any]) -> tuple[str, str, str]:
    """(status, reason, message) of the Ready condition; '?' before the operator reported."""
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return (
                str(condition.get("status")),
                str(condition.get("reason") or ""),
                str(condition.get("message") or ""),
            )
    return ("?", "", "no status yet: the operator has not handled it")


@dataclass(frozen=True)
class Listing:
    """One namespace's resources, by plural."""

    namespace: str
    items: Mapping[str, list[dict[str, Any]]]


def _connection(body: Mapping[str, Any]) -> str:
    spec, status = body.get("spec") or {}, body.get("status") or {}
    recorded = status.get("connectionRef")
    if isinstance(recorded, str):
        return recorded or "default"
    if spec.get("clusterConnectionRef"):
        return f"ClusterNatsConnection/{spec['clusterConnectionRef']}"
    return str(spec.get("connectionRef") or "default")


def status_lines(listing: Listing, all_namespaces: bool) -> list[str]:
    """Each stream-backed resource, its consumers under it, then consumers of no listed stream."""
    consumers = listing.items.get("consumers", [])
    by_stream: dict[str, list[dict[str, Any]]] = {}
    for consumer in consumers:
        stream = (consumer.get("status") or {}).get("streamName") or (
            consumer.get("spec") or {}
        ).get("streamName")
        key = f"{consumer['metadata'].get('namespace', '')}/{stream}"
        by_stream.setdefault(key, []).append(consumer)
    lines = []
    header = "NAMESPACE  " if all_namespaces else ""
    lines.append(f"{header}RESOURCE / CONSUMER  NATS NAME  READY  MESSAGES  SIZE  LAG  CONNECTION")
    for plural in STREAM_PLURALS:
        for item in listing.items.get(plural, []):
            metadata, status = item["metadata"], item.get("status") or {}
            nats_name = status.get("streamName") or (item.get("spec") or {}).get("name") or "-"
            ready, reason, _ = ready_of(item)
            where = f"{metadata.get('namespace', '')}  " if all_namespaces else ""
            lines.append(
                f"{where}{plural[:-1]}/{metadata['name']}  {nats_name}  {ready} {reason}  "
                f"{status.get('messages', status.get('values', status.get('objects', '-')))}  "
                f"{human_bytes(status.get('bytes'))}  -  {_connection(item)}"
            )
            for consumer in by_stream.pop(f"{metadata.get('namespace', '')}/{nats_name}", []):
                lines.append(_consumer_line(consumer, all_namespaces, indent="  "))
    for orphans in by_stream.values():
        for consumer in orphans:
            lines.append(_consumer_line(consumer, all_namespaces, indent=""))
    return lines


def _consumer_line(consumer: Mapping[str, Any], all_namespaces: bool, indent: str) -> str:
    metadata, status = consumer["metadata"], consumer.get("status") or {}
    ready, reason, _ = ready_of(consumer)
    where = f"{metadata.get('namespace', '')}  " if all_namespaces else ""
    name = status.get("consumerName") or (consumer.get("spec") or {}).get("durableName") or "-"
    lag = status.get("numPending", "-")
    acks = status.get("numAckPending")
    pending = f"{lag}" + (f" ({acks} unacked)" if isinstance(acks, int) and acks else "")
    return (
        f"{where}{indent}consumer/{metadata['name']}  {name}  {ready} {reason}  -  -  "
        f"{pending}  {_connection(consumer)}"
    )


def why_lines(body: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The conditions, the latest Events, and what the reason list says to do."""
    metadata = body.get("metadata") or {}
    ready, reason, message = ready_of(body)
    lines = [f"{body.get('kind')} {metadata.get('namespace')}/{metadata.get('name')}"]
    if ready == "True" and reason != "Paused":
        lines.append(f"Ready: {reason}: {message}")
        return lines
    state = "Paused, as declared" if ready == "True" else "Not ready"
    lines.append(f"{state}: {reason or 'no status yet'}: {message}")
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") != "Ready" and condition.get("status") == "True":
            lines.append(f"{condition.get('type')}: {condition.get('reason')}")
    row = explain(reason)
    if row is not None:
        lines.append(f"What it means: {row.means}")
        lines.append(f"What to do: {row.todo}")
    if events:
        lines.append("Recent events:")
        for event in events[-EVENTS_SHOWN:]:
            lines.append(
                f"  {event.get('lastTimestamp') or event.get('eventTime') or ''} "
                f"{event.get('type')} {event.get('reason')}: {event.get('message')}"
            )
    return lines


def _collection(plural: str, namespace: str | None) -> str:
    base = f"/apis/{GROUP}/{VERSION}"
    return f"{base}/{plural}" if namespace is None else f"{base}/namespaces/{namespace}/{plural}"


async def _status(api: KubeApi, namespace: str | None) -> list[str]:
    items = {}
    for plural in (*STREAM_PLURALS, "consumers"):
        listed = await api.request("GET", _collection(plural, namespace))
        items[plural] = sorted(
            listed.get("items") or [],
            key=lambda item: (item["metadata"].get("namespace", ""), item["metadata"]["name"]),
        )
    lines = status_lines(Listing(namespace or "", items), all_namespaces=namespace is None)
    if len(lines) == 1:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        return [f"No streams, buckets or consumers in {where}."]
    return lines


async def _why(api: KubeApi, target: str, namespace: str) -> list[str]:
    kind, _, name = target.partition("/")
    plural = KINDS.get(kind.lower())
    if plural is None or not name:
        known = "stream, keyvalue, objectstore, consumer, natsconnection"
        raise PluginError(f"why takes KIND/NAME with KIND one of {known}, not {target!r}")
    try:
        body = await api.request("GET", f"{_collection(plural, namespace)}/{name}")
    except ApiError as error:
        if error.status == 404:
            raise PluginError(f"{kind}/{name} not found in namespace {namespace}") from None
        raise
    selector = f"involvedObject.name={name},involvedObject.kind={body.get('kind')}"
    events = await api.request(
        "GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector={selector}"
    )
    listed = sorted(
        events.get("items") or [],
        key=lambda event: str(event.get("lastTimestamp") or event.get("eventTime") or ""),
    )
    return why_lines(body, listed)


async def run(args: argparse.Namespace) -> list[str]:
    login = client_login()
    namespace = (
        None
        if getattr(args, "all_namespaces", False)
        else (args.namespace or login.default_namespace or "default")
    )
    async with KubeApi(lambda: login) as api:
        if args.command == "status":
            return await _status(api, namespace)
        return await _why(api, args.target, namespace or "default")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl jetstream", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="each stream with its consumers, lag, readiness")
    status.add_argument("-n", "--namespace")
    status.add_argument("-A", "--all-namespaces", action="store_true")
    why = commands.add_parser("why", help="why a resource is not Ready, and what to do")
    why.add_argument("target", help="KIND/NAME, e.g. stream/orders")
    why.add_argument("-n", "--namespace")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        lines = asyncio.run(run(args))
    except PluginError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except ApiError as error:
        print(f"error: the API server refused: {error}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
