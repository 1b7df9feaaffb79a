"""Start-up wiring: kopf's tuning and the operator's shared services, built once into the memo
(`services.SharedMemo`) that every handler receives, and stopped at shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from functools import partial
from typing import Any

import kopf

from . import GROUP, metrics
from .api.kinds import CLUSTER_NATS_CONNECTION, CONSUMER, NATS_ACCOUNT, NATS_CONNECTION, NATS_USER
from .api.status import LAST_HANDLED_FIELD
from .handlers.arrivals import StreamArrivals
from .handlers.connection_directory import ConnectionDirectory, Serving
from .handlers.failures import FailureMemories, FailureMemory
from .handlers.pacing import Pace
from .handlers.registry import ConnectionKey, ResourceRegistry, ready_counts
from .handlers.resource_figures import LiveFigures, resource_series
from .handlers.status_writes import StatusBudget
from .handlers.tenancy_gate import TenancyGate, tenancy_by_connection
from .k8s.client import KubeApi
from .k8s.login import credentials
from .k8s.namespaces import NamespaceLabels
from .k8s.owned_secrets import OwnedSecrets
from .k8s.peering import PeeringCheck
from .k8s.secrets import SecretReader
from .k8s.status import EventPoster, ResourceWriter
from .k8s.throttle import Burst, DeletionRequests, RequestLimit, WritesLull
from .k8s.watch import NamespaceWatches
from .marks import FINALIZER, KOPF_ANNOTATION_PREFIX, PAUSE_ANNOTATION
from .memory import HeapTrimmer
from .nats.pool import ConnectionPool, ConnectionTarget
from .passes import account, connection
from .queueing import EventObservers, observe_events, tune_queueing
from .reconcile.backed import STREAM_BACKED, STREAM_KIND, StreamBackedKind
from .services import SharedMemo
from .settings import OperatorSettings, default_target
from .triggers.drift import DriftWatcher, WatchSettings
from .triggers.watchers import WatcherSet

RESUME_RATE = 200.0
"""First passes a second of the resources a restarted operator finds not Ready, over all kinds.
Gentle on NATS. A pass waiting for its turn holds one of kopf's workers, so new resources queue
behind these passes; they drain at this rate, where a random wait of up to 10 s each kept new
resources waiting for minutes at a small worker limit."""


def request_limit(memo: SharedMemo) -> RequestLimit:
    """One limit for all the operator's Kubernetes requests, kopf's and its own, so both step
    back while the API server is slow or people create or delete resources in a burst, and
    Events give way to status; made by whichever of login and startup runs first. It also taps
    our watches for new resources."""
    if "kube_request_limit" not in memo:
        ours = OperatorSettings()
        burst = Burst(ours.yield_to_creations) if ours.yield_to_creations else None
        deletions = (
            DeletionRequests(Burst(ours.yield_to_deletions, seen_total=metrics.DELETIONS_SEEN))
            if ours.yield_to_deletions
            else None
        )
        memo.kube_request_limit = RequestLimit(
            ours.kube_requests,
            ours.kube_requests_adaptive,
            burst,
            added=lambda plural, body: _announce(memo, plural, body),
            deletions=deletions,
            lull=WritesLull(ours.events_yield_to_writes) if ours.events_yield_to_writes else None,
        )
    return memo.kube_request_limit


def _announce(memo: SharedMemo, plural: str, body: Mapping[str, Any]) -> None:
    """A new resource, in its registry before kopf handles it (ResourceRegistry.announce)."""
    if "consumers" not in memo:
        return  # before startup: kopf's own handling brings it
    if plural == CONSUMER.plural:
        memo.consumers.announce(body)
    for kind in STREAM_BACKED:
        if plural == kind.resource.plural:
            memo.backed[kind.resource.kind].announce(body)


async def start(settings: kopf.OperatorSettings, memo: SharedMemo) -> None:
    """All framework tuning in one place, then the services every handler shares: registries,
    NATS connections, Kubernetes writers, drift repair, metrics."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=KOPF_ANNOTATION_PREFIX
    )
    # In status, not an annotation: kopf then writes it in the same request as our status,
    # which saves one of the four writes handling a new resource costs.
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(field=LAST_HANDLED_FIELD)
    # Only our own events reach Kubernetes; kopf's routine log lines stay in the log.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    operator_settings = OperatorSettings()
    tune_queueing(settings, operator_settings.workers)
    peering_check: PeeringCheck | None = None
    if operator_settings.peering:
        settings.peering.standalone = False
        settings.peering.mandatory = True
        settings.peering.clusterwide = True
        settings.peering.name = operator_settings.peering
        settings.peering.priority = operator_settings.priority
        settings.peering.lifetime = operator_settings.peering_lifetime
    else:
        settings.peering.standalone = True
    memo.settings = operator_settings
    memo.pool = ConnectionPool(request_timeout=operator_settings.nats_request_timeout)
    memo.backed = {kind.resource.kind: ResourceRegistry() for kind in STREAM_BACKED}
    memo.streams = memo.backed[STREAM_KIND.resource.kind]
    memo.consumers = ResourceRegistry()
    memo.clusterconnections = ResourceRegistry()
    memo.accounts = ResourceRegistry()
    memo.natsusers = ResourceRegistry()
    memo.account_locks = {}
    memo.account_keys = {}
    memo.account_signers = {}
    # Its own session: the namespaces' watch holds a connection. Started now, so that a
    # stream's sharedWithSelector knows the namespaces' labels by the first passes.
    memo.namespace_labels = NamespaceLabels(KubeApi(lambda: credentials(settings), connections=0))
    memo.namespace_labels.start()
    memo.tenancy = TenancyGate(
        tenancy_by_connection(operator_settings.tenancy, memo.clusterconnections),
        backed_registries(memo),
        memo.consumers,
        memo.namespace_labels.known,
    )
    memo.figures = LiveFigures(memo.namespace_labels.known)
    memo.arrivals = StreamArrivals()
    memo.resume_pace = Pace(RESUME_RATE)
    memo.natsconnections = ResourceRegistry()
    observe_events(
        EventObservers(
            GROUP,
            {
                plural: partial(observe, memo, registry)
                for plural, registry in observed(memo).items()
            },
            LAST_HANDLED_FIELD,
            progress_prefix=KOPF_ANNOTATION_PREFIX,
        )
    )
    memo.connection_probed = {}
    memo.failures = FailureMemories(
        lambda: FailureMemory(
            base_delay=operator_settings.retry_base_delay,
            max_delay=operator_settings.retry_max_delay,
            transient_max_delay=min(30.0, operator_settings.retry_max_delay),
        )
    )
    budget = memo.budget = StatusBudget.for_intervals(
        operator_settings.status_interval,
        operator_settings.status_writes_per_second,
        operator_settings.resync_interval,
    )
    kubernetes = memo.kubernetes = KubeApi(
        lambda: credentials(settings), middlewares=(request_limit(memo),)
    )
    if operator_settings.peering:
        peering_check = PeeringCheck(
            kubernetes,
            operator_settings.peering,
            os.environ.get("POD_ID", ""),
            operator_settings.priority,
        )
    memo.writer = ResourceWriter(kubernetes)
    memo.events = EventPoster(
        memo.writer, request_limit(memo).lull, normal=operator_settings.events == "all"
    )
    memo.secrets = SecretReader(kubernetes)
    memo.owned_secrets = OwnedSecrets(kubernetes)
    memo.explained = {}
    memo.unresolved = set()
    memo.background = set()
    memo.connection_watches = None
    if not operator_settings.manage_connections:
        # Its own session: a watch holds a connection for WATCH_SECONDS, and must not take
        # one of those the operator's requests share.
        memo.connection_watches = NamespaceWatches(
            KubeApi(lambda: credentials(settings), connections=0),
            NATS_CONNECTION.plural,
            lambda event_type, body: connection.read_connection(memo, event_type, body),
        )
    memo.directory = ConnectionDirectory(
        default_target(operator_settings),
        memo.natsconnections,
        memo.secrets,
        memo.pool,
        require_reference=operator_settings.require_connection_ref,
        changed=lambda: connection.targets_changed(memo),
        follow=memo.connection_watches.follow if memo.connection_watches else None,
        clusterwide=memo.clusterconnections,
        serving=Serving(
            operator_settings.namespace_selector,
            operator_settings.own_namespace,
            memo.namespace_labels.of,
        ),
    )
    watch_settings = WatchSettings(
        resync_interval=operator_settings.resync_interval,
        consumer_resync_interval=operator_settings.consumer_resync_interval,
        consumer_idle_resync_interval=operator_settings.consumer_idle_resync_interval,
        use_advisories=operator_settings.advisories,
        read_only=operator_settings.read_only,
        pause_annotation=PAUSE_ANNOTATION,
    )

    def make_watcher(key: ConnectionKey, target: ConnectionTarget) -> DriftWatcher:
        return DriftWatcher(
            backed_registries(memo),
            memo.consumers,
            memo.pool,
            target,
            memo.writer,
            memo.events,
            watch_settings,
            key,
            may_act=peering_check.active if peering_check else None,
            failures=memo.failures.for_connection(key),
            budget=budget,
            explained=memo.explained.get,
            gate=memo.tenancy,
            figures=memo.figures,
            monitoring=(
                account.account_monitoring(memo, key)
                if operator_settings.consumers_from_monitoring
                else None
            ),
        )

    memo.watchers = WatcherSet(make_watcher)
    memo.watchers.sync(memo.directory.known())
    # Freed heap stays in RSS until trimmed: idle at 2,000 resources 146-205 -> 110-113 MiB.
    memo.trimmer = asyncio.create_task(HeapTrimmer().run(), name="heap-trimmer")
    memo.follower = (
        None
        if operator_settings.manage_connections
        else asyncio.create_task(connection.follow_connections(memo), name="connection-follower")
    )
    if operator_settings.metrics_port is not None:
        registries = {
            **memo.backed,
            CONSUMER.kind: memo.consumers,
            NATS_CONNECTION.kind: memo.natsconnections,
            CLUSTER_NATS_CONNECTION.kind: memo.clusterconnections,
            NATS_ACCOUNT.kind: memo.accounts,
            NATS_USER.kind: memo.natsusers,
        }
        metrics.serve(
            operator_settings.metrics_port,
            metrics.StateCollector(
                lambda: ready_counts(registries),
                lambda: [
                    (target.label, memo.pool.is_connected(target))
                    for target in memo.directory.known().values()
                ],
                lambda: resource_series(
                    (
                        (kind, resource)
                        for kind in (*memo.backed, CONSUMER.kind)
                        for resource in (registries[kind])
                    ),
                    memo.figures,
                    operator_settings.resource_metrics_limit,
                ),
            ),
            operator_settings.metrics_address,
        )


async def stop(memo: SharedMemo) -> None:
    """Stop what `start` started, the NATS connections last."""
    await memo.events.close()
    memo.trimmer.cancel()
    if memo.follower is not None:
        memo.follower.cancel()
        for task in list(memo.background):
            task.cancel()
    if memo.connection_watches is not None:
        await memo.connection_watches.stop()
    await memo.namespace_labels.stop()
    await memo.watchers.stop()
    await memo.pool.close()
    await memo.kubernetes.close()


def backed_registries(memo: SharedMemo) -> dict[StreamBackedKind, ResourceRegistry]:
    return {kind: memo.backed[kind.resource.kind] for kind in STREAM_BACKED}


def observe(memo: SharedMemo, registry: ResourceRegistry, event: kopf.RawEvent) -> None:
    body = event.get("object") or {}
    uid = str((body.get("metadata") or {}).get("uid", ""))
    registry.observe(event.get("type"), body)
    if memo.connection_watches is not None and event.get("type") != "DELETED":
        connection.wanted_connection(memo, body)
    tracked = registry.get(uid)
    if tracked is not None:
        memo.watchers.observed(tracked)  # a consumer may wait for this stream's first status
    if event.get("type") == "DELETED":
        memo.figures.forget(uid)
        memo.failures.forget(uid)
        memo.budget.forget(uid)
        memo.explained.pop(uid, None)


def observed(memo: SharedMemo) -> dict[str, ResourceRegistry]:
    """The registry of each kind whose every watch event `observe` reads, by plural: they keep
    drift repair and the handlers' waits current without API requests."""
    observed = {kind.resource.plural: memo.backed[kind.resource.kind] for kind in STREAM_BACKED}
    observed[CONSUMER.plural] = memo.consumers
    return observed
