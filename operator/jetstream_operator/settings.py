"""Operator settings, read once from the environment (JETSTREAM_OPERATOR_*)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .api.selector import LabelSelector
from .api.tenancy import Tenancy
from .k8s.selection import label_selector_problem
from .nats.pool import AuthMaterial, ConnectionTarget, TlsMaterial


class OperatorSettings(BaseSettings):
    """What an installation may tune; the Helm chart sets these as environment variables."""

    model_config = SettingsConfigDict(
        env_prefix="JETSTREAM_OPERATOR_", use_attribute_docstrings=True
    )

    nats_url: str = Field(default="nats://127.0.0.1:4222")
    """Servers of the default NATS connection, comma-separated."""
    nats_request_timeout: float = Field(default=5.0, gt=0)
    """Seconds to wait for a JetStream API answer."""
    retry_base_delay: float = Field(default=2.0, gt=0)
    """First retry delay after a failure; doubled each time up to retry_max_delay."""
    retry_max_delay: float = Field(default=300.0, gt=0)
    """Longest wait between retries of a failing resource."""
    namespaces: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Namespaces to watch (comma-separated, globs and !negations allowed); empty for all."""
    selector: str | None = None
    """Serve only the Streams, Consumers, KeyValues and ObjectStores with these labels (kubectl's
    syntax: `shard=a`, `shard in (a,b)`, `!legacy`), so several deployments can share a
    namespace (docs/scaling.md); unset for all. NatsConnections are not selected: a
    deployment needs those its resources use."""
    namespace_selector: LabelSelector | None = None
    """The namespaces whose resources may use the default connection, as a label selector in
    JSON (the chart's `nats.namespaceSelector`): `{}` for every namespace (what 0.1.0 did),
    `{"matchLabels": {"jetstream-operator.io/default-connection": "true"}}` for those a
    platform team marks. Unset: none, so a fresh install hands no namespace the operator's own
    NATS identity until told to (docs/tenancy.md)."""
    own_namespace: str = Field(
        default="",
        validation_alias=AliasChoices("JETSTREAM_OPERATOR_OWN_NAMESPACE", "POD_NAMESPACE"),
    )
    """The operator's namespace, where ClusterNatsConnections' Secrets are (in a pod: its
    POD_NAMESPACE)."""
    tenancy: Tenancy | None = None
    """What each namespace may do through the default connection, as JSON (the chart's
    `nats.tenancy`): `{"namePrefix": "{namespace}-", "subjectPrefixes":
    ["{namespace}."], "quotas": {"streams": 20}}` (docs/tenancy.md). Unset: no limits, for a
    single team."""
    manage_connections: bool = True
    """Write NatsConnections: their status, Events and finalizers, and their Secrets'
    finalizers. Where several deployments share a namespace by `selector`, one manages its
    connections and the others set this to false: they only read the connections, to reach
    NATS for their own resources."""
    resync_interval: float = Field(default=30.0, gt=0)
    """Seconds between full checks of every stream against its resource (one paged listing)."""
    consumer_resync_interval: float = Field(default=300.0, gt=0)
    """Seconds within which a consumer that clients are reading is listed even if its stream
    gets no new messages, so its delivered/pending figures in status follow a drained backlog.
    Changes made by anyone else are seen at once through advisories, whatever this is."""
    consumer_idle_resync_interval: float = Field(default=14400.0, gt=0)
    """Seconds within which an idle consumer is listed anyway: the guard against an advisory
    lost without a reconnect, and how soon reading that starts with no new messages shows."""
    status_interval: float = Field(default=60.0, ge=0)
    """Seconds between status writes of a resource whose only changes are traffic counters
    (messages, bytes, sequences, pending); conditions and spec-driven changes are never held."""
    status_writes_per_second: float = Field(default=5.0, gt=0)
    """Counter-only status writes per second over all resources, so thousands of busy streams
    cannot flood the API server; the rest wait for a later pass."""
    advisories: bool = True
    """Repair out-of-band changes as soon as the server announces them."""
    consumers_from_monitoring: bool = True
    """For a ClusterNatsConnection into a NatsAccount, read every consumer of the account on
    each pass with one JSZ request through the account's system connection (an answer per
    server, holding every consumer) instead of a CONSUMER.LIST request per stream. Off: the
    per-stream listings, whose number grows with the streams that have measured consumers."""
    events: Literal["all", "warnings"] = "all"
    """Which Kubernetes Events to post: all (Created, Updated, DriftRepaired... and every
    Warning), or warnings only. Each Normal Event is an API write: at thousands of resources
    created at once, `warnings` saves about a third of the writes."""
    read_only: bool = False
    """Observe and report only: never create, update or delete anything in NATS."""
    require_connection_ref: bool = False
    """Serve only resources naming a NatsConnection of their namespace, so tenants cannot use
    the default (system) connection."""
    peering: str | None = None
    """kopf peering name: replicas with the same name run active/standby (ClusterKopfPeering)."""
    priority: int = 0
    """This replica's peering priority; the highest live one is active, the others wait."""
    workers: int = Field(default=128, ge=0)
    """Resources of one kind handled at once per watch (one watch per kind, or per kind and
    namespace when `namespaces` is set); 0 for no limit. Beyond it, the rest of a burst waits in
    kopf's queue, each resource with its events, instead of in a running handler that holds
    more: with a request limit, 10,000 new resources took 264 MiB with 128 and 451 MiB without
    (bench/results/diary-2026-11.md). A deletion that waits for NATS keeps its place while it
    waits, so 128 blocked deletions of one kind would hold up the rest of that kind until NATS
    answers or their finalizers are released."""
    kube_requests: int = Field(default=32, ge=0)
    """At most this many Kubernetes API requests in flight at once, kopf's and the operator's
    own (Events, status, Secrets), watches aside; 0 for no limit. Without a limit, a burst of
    new resources becomes hundreds of concurrent patches that an API server short of CPU
    serves before the user's own applies (slowed 6.5-8.5x at 2,000 resources)."""
    kube_requests_adaptive: bool = True
    """Fewer than `kube_requests` in flight while the API server answers slowly, down to 8
    (k8s/throttle.py, AdaptiveLimit): it then spends its time on others' requests first. Before
    writes yielded to bursts of creations, it slowed the user's applies beside 2,000 new
    resources 1.35-1.6x instead of 2.3-3.4x with a fixed limit of 8
    (bench/results/diary-2026-11.md)."""
    yield_to_creations: float = Field(default=30.0, ge=0)
    """While people create resources of the operator's kinds in a burst (at least 32 in a
    second; k8s/throttle.py, Burst), the operator's Kubernetes writes wait until it ends,
    for at most this many seconds from its start, so their own applies go first; 0 never
    waits. The work in NATS goes on meanwhile."""
    yield_to_deletions: float = Field(default=30.0, ge=0)
    """The same for a burst of deletions (at least 32 requests in a second, as `kubectl delete
    -f` of many resources makes): the finalizer removals and Events wait until it ends, at most
    this many seconds from its start; 0 never waits. Deletions in NATS go on meanwhile."""
    events_yield_to_writes: float = Field(default=20.0, ge=0)
    """While the operator writes the status of many resources at once, as thousands
    converging make it, its Events wait until those writes pause (none for 0.1 s;
    k8s/throttle.py, WritesLull), for at most this many seconds from when they happened, so the
    resources turn Ready first; 0 posts them without waiting. A single change leaves its Event
    no wait. Either way Events go 8 at a time (k8s/status.py, EventPoster)."""
    peering_lifetime: int = Field(default=60, ge=2)
    """Seconds a silent peer counts as alive; a standby takes over this long after a crash."""
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """Serve Prometheus metrics on this port; off when unset."""
    metrics_address: str = "0.0.0.0"
    """Address the metrics server binds: all interfaces in a pod; 127.0.0.1 on a workstation."""
    resource_metrics_limit: int = Field(default=10_000, ge=0)
    """The most resources with series of their own (those labelled, or in a namespace labelled,
    jetstream-operator.io/metrics=true); the rest are counted in
    jetstream_operator_resource_metrics_omitted."""
    log_format: Literal["text", "json"] = "text"
    """Log lines as text, or as one JSON object per line for log pipelines."""
    connection_check_interval: float = Field(default=10.0, gt=0)
    """Seconds between re-reading a NatsConnection's Secrets and re-checking it."""
    nats_creds_file: str | None = None
    """Creds file (JWT and seed) for the default connection, e.g. mounted from a Secret."""
    nats_tls_ca: str | None = None
    """CA bundle file for the default connection."""
    nats_tls_cert: str | None = None
    """Client certificate file for the default connection."""
    nats_tls_key: str | None = None
    """Client key file for the default connection."""

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split_namespaces(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("selector")
    @classmethod
    def _check_selector(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = label_selector_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value.strip()

    def kopf_namespace_patterns(self) -> list[str]:
        """The namespaces setting as kopf patterns: every plain entry or glob adds namespaces,
        every !negation takes them away, whatever the order.

        kopf ORs the patterns of a list, but inside one comma-joined pattern a later glob only
        re-admits what a negation before it removed: `team-a,team-b` as one pattern would
        watch team-a alone. So each positive entry is a pattern of its own, carrying every
        negation; negations alone are one pattern, where kopf implies a leading `*`.
        """
        negations = [entry for entry in self.namespaces if entry.startswith("!")]
        positives = [entry for entry in self.namespaces if not entry.startswith("!")]
        if not positives:
            return [",".join(negations)] if negations else []
        return [",".join([positive, *negations]) for positive in positives]

    def nats_servers(self) -> list[str]:
        return [server.strip() for server in self.nats_url.split(",") if server.strip()]

    def retry_delay(self, attempt: int) -> float:
        """Exponential backoff, so a failing resource never loops hot."""
        return min(self.retry_max_delay, self.retry_base_delay * 2.0 ** max(0, attempt))


def default_target(settings: OperatorSettings) -> ConnectionTarget:
    """The operator's own connection, from its settings and mounted files."""

    def read(path: str | None) -> bytes | None:
        return Path(path).read_bytes() if path else None

    tls = None
    if settings.nats_tls_ca or settings.nats_tls_cert:
        tls = TlsMaterial(
            read(settings.nats_tls_ca), read(settings.nats_tls_cert), read(settings.nats_tls_key)
        )
    auth = None
    if settings.nats_creds_file:
        auth = AuthMaterial("creds", "", Path(settings.nats_creds_file).read_text())
    return ConnectionTarget(tuple(settings.nats_servers()), auth=auth, tls=tls)


SETTINGS_DOC_HEADER = """# Settings

Every setting of `jetstream-operator run`, read once from the environment at start. Generated
from `operator/jetstream_operator/settings.py` by `jetstream-operator settings --markdown`; a
unit test fails when this page and the code differ. The Helm chart sets most of them from its
values ([charts/jetstream-operator/README.md](../charts/jetstream-operator/README.md)).

| variable | default | what it does |
|---|---|---|
"""


def settings_markdown() -> str:
    """docs/settings.md: each field's variable(s), default and docstring, in the model's order."""
    rows = []
    for name, field in OperatorSettings.model_fields.items():
        alias = field.validation_alias
        variables = (
            [str(choice) for choice in alias.choices]
            if isinstance(alias, AliasChoices)
            else [f"JETSTREAM_OPERATOR_{name.upper()}"]
        )
        default = field.get_default(call_default_factory=True)
        shown = "(unset)" if default in (None, [], "") else f"`{_json_default(default)}`"
        text = " ".join((field.description or "").split()).replace("|", "\\|")
        rows.append(f"| {' or '.join(f'`{v}`' for v in variables)} | {shown} | {text} |")
    return SETTINGS_DOC_HEADER + "\n".join(rows) + "\n"


def _json_default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
