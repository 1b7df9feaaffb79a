"""Every reason the operator writes or posts, with what it means and what to do: the one list
that docs/conditions.md's table is made from (`jetstream-operator reasons`, checked by a unit
test) and that `kubectl jetstream why` explains a resource with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    """One row: the reasons it covers, how Ready and Stalled read ("(event)" for an Event
    only), its meaning and what to do, in the Markdown the docs show."""

    names: tuple[str, ...]
    ready: str
    stalled: str
    means: str
    todo: str


REASONS: tuple[Reason, ...] = (
    Reason(
        ("Synced",),
        "True",
        "False",
        "the server holds exactly what the spec says",
        "nothing",
    ),
    Reason(
        ("Created", "Updated", "DriftRepaired"),
        "(events)",
        "",
        "reported as Normal Events, Ready stays `Synced`",
        "nothing",
    ),
    Reason(
        ("Recreating",),
        "(event)",
        "",
        (
            "a Warning Event: a consumer is deleted and created again because an immutable "
            "field changed and `spec.recreateOnImmutableChange` is set; it starts again just "
            "after its ack floor (what was delivered but not acknowledged comes again), or "
            "where new start fields say"
        ),
        "nothing; it was asked for",
    ),
    Reason(
        ("Reattached",),
        "(event)",
        "",
        (
            "the resource has the same namespace/name as the recorded owner but a new UID (a "
            "backup restore, a rebuilt cluster, or the manifest applied again after a deletion "
            "that retained the object), and took the object over again"
        ),
        'nothing; see "What identifies an owner"',
    ),
    Reason(
        ("RecreatedAfterLoss",),
        "True",
        "False",
        (
            "the stream vanished from NATS while status showed it held data; it was created "
            "again, empty, and a Warning Event says what was lost (message count, sequences, "
            "bytes)"
        ),
        "restore the data from a backup if it matters; find out who deleted it",
    ),
    Reason(
        ("UpdatesPrevented",),
        "True",
        "False",
        "the object differs from the spec but `spec.preventUpdate` is set",
        "remove `preventUpdate` to apply the spec",
    ),
    Reason(
        ("Paused",),
        "True, or False",
        "False",
        (
            'the `jetstream-operator.io/paused: "true"` annotation is set; nothing is done. '
            "Ready stays True where the last pass found the object as declared for this "
            "generation (kstatus reads Current, Argo CD Suspended); a spec changed while "
            "paused is Ready=False, neither Reconciling nor Stalled (kstatus: InProgress)"
        ),
        "remove the annotation",
    ),
    Reason(
        ("ReadOnly",),
        "False",
        "True",
        "the operator runs read-only and would have to change NATS",
        "run it without read-only mode",
    ),
    Reason(
        ("InvalidSpec",),
        "False",
        "True",
        "the spec fails validation that admission could not do",
        "fix the field named in the message",
    ),
    Reason(
        ("Conflict",),
        "False",
        "True",
        (
            "the stream or consumer exists in NATS and belongs to another resource, or to "
            "nobody and `adoption` is not `IfUnowned`"
        ),
        (
            "choose another `spec.name`, or set `spec.adoption: IfUnowned` to adopt an unowned "
            "one. The message names the other resource only when it is in the same namespace; "
            "across namespaces it says only that the name is taken"
        ),
    ),
    Reason(
        ("ImmutableFieldChanged",),
        "False",
        "True",
        (
            "a consumer field the server cannot change was changed; or, where the admission "
            "policies are not in effect, the spec now names another stream, bucket or consumer "
            "than the one the resource manages, another stream for a managed consumer "
            "(`spec.streamName` or `spec.streamRef`), or another connection than the one it "
            "was made through (`status.connectionRef`; nothing is made under the new name or "
            "on the other system); a Stream's `spec.firstSequence` that its stream did not "
            "start at (NATS takes it only at creation)"
        ),
        (
            "revert it, or set `recreateOnImmutableChange: true` (the consumer keeps its "
            "position unless its start fields changed); for a new name or connection, set it "
            "back or create a new resource; remove "
            "`spec.firstSequence` or set it to the stream's start"
        ),
    ),
    Reason(
        ("NotPermitted",),
        "False",
        "True",
        (
            "the connection's tenancy (the default connection's, or a ClusterNatsConnection's) "
            "does not allow it: a name without the namespace's prefix, a subject outside its "
            "prefixes, another namespace's stream not shared with it (`spec.sharedWith`), "
            "`adoption: IfUnowned` where adoption is forbidden, no `spec.maxBytes` where it is "
            "required. Nothing was asked of NATS ([tenancy.md](tenancy.md))"
        ),
        "do what the message says instead",
    ),
    Reason(
        ("NotPermitted",),
        "False",
        "False",
        (
            "the connection does not serve the namespace: the default connection's selector "
            "(`nats.namespaceSelector`; none by default) or the ClusterNatsConnection's "
            "`namespaceSelector` does not select it. Nothing was asked of NATS; retried with "
            "backoff (at most 30 s)"
        ),
        (
            "name a connection that serves the namespace, or ask the platform team to select "
            "it (label the namespace); the resource becomes Ready without a change"
        ),
    ),
    Reason(
        ("QuotaExceeded",),
        "False",
        "True",
        (
            "the namespace's quota on the connection is used up (the message gives the usage), "
            "or `spec.replicas` is over the most allowed. Nothing was asked of NATS"
        ),
        (
            "delete something, lower the request, or ask the platform team; a resource waiting "
            "for room is made on its next pass once there is"
        ),
    ),
    Reason(
        ("ServerRejected",),
        "False",
        "True",
        "NATS refused the config; the server's words and error code are in the message",
        "change the spec; the operator retries with backoff in case the world changed",
    ),
    Reason(
        ("NotConverging",),
        "False",
        "True",
        (
            "an update was sent and the server kept its own values for the named fields; "
            "sending it again would only loop"
        ),
        "write what the server accepts for those fields (docs/server-rewrites.md)",
    ),
    Reason(
        ("Moving",),
        "False",
        "False",
        (
            "a placement change (or, briefly, a drop of replicas) is under way: the stream's "
            "Raft group holds more peers than its replicas while the new ones catch up (the "
            "message names them). The stream serves meanwhile; the operator sends nothing and "
            "looks again, with backoff, until the old peers have left"
        ),
        "nothing; wait (a move that never ends usually lacks a server with the new tags)",
    ),
    Reason(
        ("StreamNotFound",),
        "False",
        "False",
        "the consumer's stream does not exist (yet)",
        (
            "create the Stream, or fix `streamName` / `streamRef`; the consumer follows as "
            "soon as it exists"
        ),
    ),
    Reason(
        ("NatsUnavailable",),
        "False",
        "False",
        (
            "NATS did not answer, the connection closed, the cluster is electing a leader "
            '(503, error 10008), or a placement waits for a peer that is offline (10005, "peer '
            'offline")'
        ),
        "nothing if brief; otherwise check NATS. Never the spec's fault",
    ),
    Reason(
        ("Unreachable", "AuthFailed", "TLSFailed", "CredentialsExpired"),
        "False",
        "False",
        (
            "the operator's default connection could not be made (a resource naming a "
            "NatsConnection or ClusterNatsConnection reports `ConnectionNotReady` instead, and "
            "the connection says which of these)"
        ),
        (
            "check the servers and `nats.url`, or the default connection's credentials; "
            "retried with backoff"
        ),
    ),
    Reason(
        ("StreamOffline",),
        "False",
        "False",
        (
            "the cluster listed the stream without its state in two resyncs in a row: every "
            "server holding it is offline, or its leader did not answer in time. Its consumers "
            "say so too (or what their own look met). Status keeps the figures last reported "
            "instead of the listing's zeros"
        ),
        "bring the stream's servers back; Ready returns at the first listing that sees it",
    ),
    Reason(
        ("ConnectionNotFound",),
        "False",
        "False",
        (
            "`spec.connectionRef` names no NatsConnection in this namespace, or "
            "`spec.clusterConnectionRef` no ClusterNatsConnection"
        ),
        "create it or fix the name",
    ),
    Reason(
        ("ConnectionNotReady",),
        "False",
        "False",
        "the named NatsConnection or ClusterNatsConnection is not Ready",
        "see that connection's condition",
    ),
    Reason(
        ("NamespacesUnknown",),
        "False",
        "False",
        (
            "the connection selects namespaces by label, and the namespaces' labels could not "
            "be listed yet"
        ),
        (
            "nothing if brief (retried); otherwise check the operator's `list` and `watch` on "
            "namespaces"
        ),
    ),
    Reason(
        ("ConnectionRequired",),
        "False",
        "True",
        "the operator serves only resources that name a connection",
        "set `spec.connectionRef` (or `spec.clusterConnectionRef`)",
    ),
    Reason(
        ("DeletionBlocked",),
        "False",
        "False",
        "being deleted, but NATS does not answer; the finalizer stays and nothing was deleted",
        'bring NATS back; if it is gone for good, see "Letting go"',
    ),
    Reason(
        ("NotEmpty",),
        "False",
        "False",
        (
            "being deleted under `deletionPolicy: DeleteIfEmpty`, but the stream still holds "
            "messages or consumers no resource manages (the message says which); nothing was "
            "deleted and the finalizer stays"
        ),
        (
            "purge or drain it, delete those consumers, or set `deletionPolicy` to `Delete` or "
            "`Retain`; the deletion completes by itself once it is empty"
        ),
    ),
    Reason(
        ("DeletionFailed",),
        "False",
        "False",
        "NATS refused the deletion",
        "read the message; the operator retries",
    ),
    Reason(
        ("Retained", "Deleted", "AlreadyGone", "NotOwned", "ReadOnly", "Released", "NotDeleted"),
        "True",
        "False",
        (
            "how a deletion ended (kept per `deletionPolicy: Retain`, deleted, already gone, "
            "not ours to delete, left by a read-only operator, let go by a person, or, for a "
            "Consumer that never named a consumer and stream, nothing to delete). The object "
            "is gone a moment later, so this is written to status only while another finalizer "
            "keeps it; an Event with the same reason records every ending that deletes "
            "something or leaves it in NATS"
        ),
        "nothing",
    ),
    Reason(
        ("InvalidPurge", "PurgeFailed"),
        "(events)",
        "",
        (
            "Warning Events: the purge annotation is malformed, or NATS refused the purge; "
            "`status.lastPurge` records the token and the error, so it is not tried again. "
            "Ready stays what it was: the stream is as declared"
        ),
        "fix the annotation's value, with a new token",
    ),
    Reason(
        ("StepDownFailed",),
        "(event)",
        "",
        (
            "a Warning Event: NATS refused the step-down asked for with "
            "`jetstream-operator.io/step-down` (a stream or consumer with one replica has no "
            "other leader); `status.lastStepDown.error` has its words. Ready stays what it was"
        ),
        "remove the annotation, or give it a new token once it has replicas",
    ),
    Reason(
        ("InvalidReset", "ResetFailed"),
        "(events)",
        "",
        (
            "Warning Events: `jetstream-operator.io/reset-to` is malformed, or NATS refused "
            "the consumer reset; `status.lastReset` records the token and the error, so it is "
            "not tried again. Ready stays what it was"
        ),
        "fix the annotation's value, with a new token",
    ),
    Reason(
        ("ConsumerReset",),
        "(event)",
        "",
        (
            "a Normal Event: the consumer reset asked for with `jetstream-operator.io/reset` "
            "was done; `status.lastReset` says the sequence and how (the server's reset API, "
            "or recreated at that sequence)"
        ),
        "nothing",
    ),
    Reason(
        ("LeaderSteppedDown",),
        "(event)",
        "",
        (
            "a Normal Event: the step-down asked for was done; `status.lastStepDown` names the "
            "old and the new leader"
        ),
        "nothing",
    ),
    Reason(
        ("Connected",),
        "True",
        "False",
        "a ClusterNatsConnection with `systemAccount: true` connects as a system-account user",
        "nothing",
    ),
    Reason(
        ("Pushed",),
        "True",
        "False",
        "a NatsAccount: the resolver accepted the account's JWT (`status.serverAnswer`)",
        "nothing",
    ),
    Reason(
        ("Repushed",),
        "(event)",
        "",
        (
            "a Warning Event: the resolver's copy of a NatsAccount's JWT was changed or removed "
            "outside Kubernetes, and the declared one was pushed again"
        ),
        "find who changes accounts by hand (nsc, `nats` CLI)",
    ),
    Reason(
        ("ResolverUnreachable",),
        "False",
        "False",
        (
            "a NatsAccount: its system connection is not ready or the resolver did not answer; "
            "retried, nothing is deleted"
        ),
        "check `spec.systemConnectionRef` and the servers",
    ),
    Reason(
        ("ResolverRefused",),
        "False",
        "False",
        "a NatsAccount: the resolver refused the JWT; the message has the server's reason",
        "check the operator signing key and the server's operator JWT",
    ),
    Reason(
        ("InvalidSigningKey",),
        "False",
        "True",
        'a NatsAccount: the Secret\'s key holds no operator seed ("SO...")',
        "put the operator signing key's seed in the Secret",
    ),
    Reason(
        ("KeysUnavailable",),
        "False",
        "False",
        "a NatsAccount: its keys Secret could not be read or written (RBAC, API server)",
        "check the operator's Role in its own namespace",
    ),
    Reason(
        ("Issued",),
        "True",
        "False",
        "a NatsUser: valid credentials with the declared permissions are in its Secret",
        "mount the Secret (key `user.creds`)",
    ),
    Reason(
        ("Rotated", "Revoked"),
        "(events)",
        "",
        (
            "Normal Events: new credentials replaced the previous ones (valid until they "
            "expire), or a deleted NatsUser's credentials were revoked in its account"
        ),
        "nothing",
    ),
    Reason(
        ("AccountNotFound", "AccountNotReady", "ReferenceNotFound"),
        "False",
        "False",
        (
            "a NatsUser waits for its NatsAccount, the account's keys, or a Stream, Consumer or "
            "bucket it names in this namespace; retried every 30 s"
        ),
        "create what the message names",
    ),
    Reason(
        ("SubjectNotAllowed",),
        "False",
        "True",
        (
            "a NatsUser asks to publish or subscribe to a subject outside its account's "
            "`userSubjectPrefixes` for the namespace; the message names the subject"
        ),
        "change the subject, or ask the platform team",
    ),
    Reason(
        ("SecretNotWritten",),
        "False",
        "False",
        "a NatsUser's Secret could not be written (RBAC, a Secret of that name not ours)",
        "check the message",
    ),
)

TABLE_HEADER = "| reason | Ready | Stalled | what it means | what to do |\n|---|---|---|---|---|\n"


def reasons_table() -> str:
    """The table of docs/conditions.md."""
    rows = []
    for reason in REASONS:
        names = ", ".join(f"`{name}`" for name in reason.names)
        cells = (names, reason.ready, reason.stalled, reason.means, reason.todo)
        rows.append("| " + " | ".join(cells).replace("|  |", "| |") + " |")
    return TABLE_HEADER + "\n".join(rows) + "\n"


def explain(name: str) -> Reason | None:
    """The row of a reason, if it is one the operator uses."""
    return next((reason for reason in REASONS if name in reason.names), None)
