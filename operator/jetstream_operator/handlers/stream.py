"""Reconcile and finalize one resource holding a stream: a Stream, KeyValue or ObjectStore.

The kind (reconcile.backed) says how its spec becomes a stream and what its status shows; the
rest, from ownership to backoff, is the same for all of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import ValidationError

from ..nats.jsapi import JetStreamApi, JetStreamError, JetStreamUnavailable
from ..reconcile.backed import StreamBackedKind
from ..reconcile.conditions import Outcome
from ..reconcile.live_state import (
    clustered,
    existed_before,
    move_in_progress,
    object_count_request,
    with_consumers_added,
)
from ..reconcile.ownership import Owner, claimed_owner, still_holding
from ..reconcile.renames import Refused
from ..reconcile.stream_config import without_server_metadata
from ..reconcile.stream_plan import (
    CreateStream,
    InSync,
    OwnedElsewhere,
    UpdatesPrevented,
    UpdateStream,
    may_delete,
    plan_stream,
    release_request,
)
from .failures import Basis, History, creates_unlooked, failure_basis
from .results import (
    Event,
    Result,
    deletion_blocked,
    left_in_nats,
    needs_a_person,
    not_converging,
    reattached_event,
    server_rejected,
    unavailable,
    updates_prevented,
    validation_message,
)

# A first create refused (the stream was there), a create or update, a placement change the
# server wants on its own, a check.
_MAX_STEPS = 5


async def reconcile(
    kind: StreamBackedKind,
    spec: Mapping[str, Any],
    owner: Owner,
    jetstream: JetStreamApi,
    *,
    drift: bool = False,
    known_info: Mapping[str, Any] | None = None,
    read_only: bool = False,
    history: History | None = None,
    created: Callable[[str, Mapping[str, Any]], Awaitable[int | None]] | None = None,
) -> Result:
    """Bring the stream on the server in line with the spec, and say how it went.

    `drift` marks a pass started by a change on the server rather than in the spec, so the
    event says what happened. `known_info` is the stream's info from a listing, which saves a
    request when the stream turns out to be in sync. `history` brings backoff, one Warning per
    distinct failure, and the guard against sending the same update twice. `created` is told
    the name of a stream just made and the server's reply, and answers how many consumers were
    made on it since (applied with it), or None when the status must come from a fresh look.

    A resource's first pass creates its stream without looking first, one request where a look
    and a create are two; the server answers the create with what it holds when that is
    identical (ours, from a pass whose status was lost) and refuses anything else, and only
    then does the pass look and plan again.
    """
    try:
        stream_spec = kind.stream_spec(spec)
    except ValidationError as error:
        result = Result(Outcome(False, "InvalidSpec", validation_message(error), stalled=True))
        return _settled(history, owner, None, result)
    status = history.status if history is not None else {}
    refusal = kind.renamed(spec, status)  # a move to another connection: `passes.envelope`
    if refusal is not None:
        return _settled(history, owner, None, needs_a_person(refusal.reason, refusal.message()))
    name = stream_spec.name
    what = kind.describe(spec)
    events: list[Event] = []
    outcome = Outcome(True, "Synced", f"{what} matches the spec")
    info: dict[str, Any] | None = dict(known_info) if known_info is not None else None
    unlooked = creates_unlooked(history, known_info, read_only)
    try:
        if known_info is None and not unlooked:
            info = await jetstream.stream_info(name)
        if history is not None:
            held = history.memory.held(owner.uid, _basis(history, info))
            if held is not None:
                return held
        for _ in range(_MAX_STEPS):
            action = plan_stream(stream_spec, owner, info)
            if read_only and isinstance(action, CreateStream | UpdateStream):
                return _read_only_result(kind, what, action, info)
            match action:
                case CreateStream(config=config):
                    try:
                        info = await jetstream.create_stream(config)
                    except JetStreamError:
                        if not unlooked or history is None:
                            raise
                        unlooked = False
                        info = await jetstream.stream_info(name)
                        if info is None:
                            raise  # not there: the refusal is the spec's
                        # There after all: plan with what it holds, as a pass that looked.
                        held = history.memory.held(owner.uid, _basis(history, info))
                        if held is not None:
                            return held
                        continue
                    if unlooked and existed_before(info):
                        unlooked = False
                        continue  # ours already, as the spec asks: nothing was made
                    unlooked = False
                    added = await created(name, info) if created is not None else 0
                    # In a cluster the create reply shows the replicas before they caught up:
                    # one INFO now saves a status write later, so status is complete when
                    # Ready. A single server's reply is already what INFO would say, but for
                    # the consumers made on the stream since, which were counted.
                    if added is None or clustered(info):
                        info = await jetstream.stream_info(name) or info
                    elif added:
                        info = with_consumers_added(info, added)
                    events.append(_creation_event(kind, spec, name, drift, history))
                    if events[-1].type == "Warning":
                        outcome = Outcome(True, "RecreatedAfterLoss", events[-1].message)
                    continue  # the server may have stored something else: look again
                case UpdateStream():
                    actual = (info or {}).get("config") or {}
                    if history is not None and history.memory.repeats(
                        owner.uid, without_server_metadata(actual), action.config
                    ):
                        result = not_converging(what, action.summary())
                        return _settled(history, owner, info, result)
                    recorded = claimed_owner(owner, actual)
                    info = await jetstream.update_stream(action.config)
                    if recorded is None:
                        events.append(Event("Normal", "Adopted", f"adopted {what}"))
                    elif owner.reattaching(recorded):
                        events.append(reattached_event(what, recorded, owner))
                    reason = "DriftRepaired" if drift else "Updated"
                    events.append(Event("Normal", reason, f"{name}: {action.summary()}"))
                    continue
                case OwnedElsewhere():
                    message = action.message(
                        kind.describe_with_stream(spec, quoted=True), kind.name_field
                    )
                    result = needs_a_person("Conflict", message)
                    return _settled(history, owner, info, result)
                case Refused():
                    result = needs_a_person(action.reason, action.message())
                    return _settled(history, owner, info, result)
                case UpdatesPrevented(differences=differences):
                    fields = ", ".join(d.field for d in differences)
                    outcome = updates_prevented(what, fields)
                case InSync():
                    pass
            break
    except JetStreamUnavailable as error:
        return _settled(history, owner, info, unavailable(error))
    except JetStreamError as error:
        return _settled(history, owner, info, server_rejected(kind.noun, error, events))
    assert info is not None
    moving = move_in_progress(info) if outcome.reason == "Synced" else None
    if moving is not None:
        # In progress, not failed: Reconciling, looked at again by the retry.
        outcome = Outcome(False, "Moving", f"{what} is {moving}")
    status = kind.live_state(info)
    if kind.counts_objects:
        status.update(await _object_count(jetstream, spec, info, history))
    return _settled(history, owner, info, Result(outcome, status=status, events=events))


async def _object_count(
    jetstream: JetStreamApi,
    spec: Mapping[str, Any],
    info: Mapping[str, Any],
    history: History | None,
) -> dict[str, Any]:
    """An object store's object count, asked again only when its stream has new messages; the
    sequence it was counted at is kept beside it."""
    last = (info.get("state") or {}).get("last_seq", 0)
    shown = history.status if history is not None else {}
    if shown.get("objects") is not None and shown.get("lastSequence") == last:
        return {"objects": shown["objects"], "lastSequence": last}
    counted = await jetstream.stream_info(
        str((info.get("config") or {}).get("name")),
        object_count_request(str(spec.get("bucket"))),
    )
    return {"objects": int((counted or {}).get("total") or 0), "lastSequence": last}


def _basis(history: History, info: Mapping[str, Any] | None) -> Basis:
    return failure_basis(history.generation, without_server_metadata((info or {}).get("config")))


def _settled(
    history: History | None, owner: Owner, info: Mapping[str, Any] | None, result: Result
) -> Result:
    if history is None:
        return result
    return history.memory.settle(
        owner.uid, _basis(history, info), result, history.ready_condition()
    )


def _creation_event(
    kind: StreamBackedKind,
    spec: Mapping[str, Any],
    name: str,
    drift: bool,
    history: History | None,
) -> Event:
    """A stream created where the resource's status shows it existed before lost whatever it
    held: say so loudly, with what status last showed."""
    status = history.status if history is not None else {}
    counts = [
        f"{int(status[key])} {key}" for key in ("messages", "values", "objects") if status.get(key)
    ]
    last_sequence = int(status.get("lastSequence") or 0)
    if last_sequence:
        counts.append(f"sequences {status.get('firstSequence', 0)}..{last_sequence}")
    if status.get("streamName") == name and (counts or status.get("bytes")):
        return Event(
            "Warning",
            "RecreatedAfterLoss",
            f"{kind.describe_with_stream(spec)} vanished from NATS and was created again, "
            f"empty: it last held {', '.join(counts)} ({status.get('bytes', 0)} bytes); "
            "restore the data from a backup if it matters",
        )
    reason = "Recreated" if drift or status.get("streamName") == name else "Created"
    return Event("Normal", reason, f"created {kind.describe(spec)}")


def _read_only_result(
    kind: StreamBackedKind,
    what: str,
    action: CreateStream | UpdateStream,
    info: dict[str, Any] | None,
) -> Result:
    if isinstance(action, CreateStream):
        message = f"{what} does not exist; not created because the operator is read-only"
    else:
        message = f"{what} differs ({action.summary()}); not updated: read-only operator"
    return Result(
        Outcome(False, "ReadOnly", message, stalled=True),
        status=kind.live_state(info) if info else {},
    )


async def finalize(
    kind: StreamBackedKind,
    spec: Mapping[str, Any],
    owner: Owner,
    jetstream: JetStreamApi,
    *,
    status: Mapping[str, Any] | None = None,
    read_only: bool = False,
) -> Result:
    """Delete the stream if this resource owns it and may delete it; leave anything else.
    `status` tells which stream it manages where a rename was refused."""
    name = kind.managed_stream(spec, status or {})
    if name is None:
        return Result(Outcome(True, "Deleted", f"no {kind.name_field}; nothing to delete"))
    what = f"{kind.noun} {kind.name_in_stream(name) or name}"
    if read_only:
        return left_in_nats("ReadOnly", f"{what} left in NATS: read-only operator")
    try:
        parsed = kind.stream_spec(spec)
        retain, only_empty = parsed.retains_data(), parsed.deletes_only_empty()
    except ValidationError:
        retain, only_empty = True, False  # when in doubt, keep the data
    try:
        info = await jetstream.stream_info(name)
        if not may_delete(owner, info):
            if info is None:
                return Result(Outcome(True, "AlreadyGone", f"{what} not deleted: AlreadyGone"))
            return left_in_nats("NotOwned", f"{what} left in NATS: this resource did not make it")
        assert info is not None
        if retain:
            release = release_request(owner, info)
            if release is not None:
                await jetstream.update_stream(release)
            return left_in_nats("Retained", f"{what} retained in NATS (deletionPolicy: Retain)")
        if only_empty:
            held = still_holding(info, await jetstream.list_consumers(name))
            if held is not None:
                return Result(
                    Outcome(
                        False,
                        "NotEmpty",
                        f"{what} still holds {held}, so deletionPolicy: DeleteIfEmpty keeps it "
                        "and this resource: it is deleted once empty. Purge or drain it, or set "
                        "deletionPolicy to Delete or Retain",
                    ),
                    retry=True,
                )
        await jetstream.delete_stream(name)
    except JetStreamUnavailable as error:
        return deletion_blocked(what, error)
    except JetStreamError as error:
        return Result(
            Outcome(False, "DeletionFailed", f"NATS refused to delete {what}: {error}"),
            retry=True,
        )
    return Result(
        Outcome(True, "Deleted", f"deleted {what}"),
        events=[Event("Normal", "Deleted", f"deleted {what}")],
    )
