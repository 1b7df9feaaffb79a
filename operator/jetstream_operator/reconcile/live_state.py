"""What status shows of the stream behind a Stream, KeyValue or ObjectStore resource."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any


def clustered(info: Mapping[str, Any]) -> bool:
    """Whether a stream's info (or create reply) comes from a JetStream cluster."""
    return bool((info.get("cluster") or {}).get("name"))


EXISTED_BEFORE_SECONDS = 5.0
"""How much older than its reply a stream or consumer must be to have been there before the
create that answered with it (a cluster's reply can trail the creation by a raft round)."""


def move_in_progress(info: Mapping[str, Any]) -> str | None:
    """How a move is going, while the stream's Raft group holds more peers than its replicas: for
    a placement change the server adds the new peers, lets them catch up, then drops the old ones
    (a drop of replicas passes through the same state briefly). None when no move is under way.
    The operator only reports it; it sends nothing meanwhile."""
    cluster = info.get("cluster") or {}
    replicas = cluster.get("replicas") or []
    peers = {str(cluster["leader"])} if cluster.get("leader") else set()
    peers |= {str(replica.get("name")) for replica in replicas if replica.get("name")}
    wanted = int((info.get("config") or {}).get("num_replicas") or 1)
    if len(peers) <= wanted:
        return None
    behind = sorted(str(r.get("name")) for r in replicas if r.get("name") and not r.get("current"))
    catching_up = f"; catching up: {', '.join(behind)}" if behind else ""
    return (
        f"moving between servers: {len(peers)} peers for {wanted} "
        f"replica{'s' if wanted != 1 else ''} ({', '.join(sorted(peers))}){catching_up}"
    )


def existed_before(reply: Mapping[str, Any], older_than: float = EXISTED_BEFORE_SECONDS) -> bool:
    """Whether a create's reply describes a stream or consumer that was already there: the
    server answers the create of one identical to what it holds with what it holds. Both times
    are the server's own, so no clock of ours is compared."""
    try:
        created = datetime.fromisoformat(str(reply["created"]))
        answered = datetime.fromisoformat(str(reply["ts"]))
        return answered - created > timedelta(seconds=older_than)
    except (KeyError, ValueError, TypeError):  # absent, unreadable, or one without a zone
        return False


def with_consumers_added(info: Mapping[str, Any], added: int) -> dict[str, Any]:
    """A stream's info with `added` more consumers in its state: those made on it by this
    process since the info was taken, which a look would show."""
    state = dict(info.get("state") or {})
    state["consumer_count"] = int(state.get("consumer_count") or 0) + added
    return {**info, "state": state}


def human_bytes(count: object) -> str:
    """1536 -> '1.5 KiB'; '-' when unknown."""
    if not isinstance(count, int) or isinstance(count, bool):
        return "-"
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _cluster_state(info: dict[str, Any]) -> dict[str, Any]:
    config = info.get("config") or {}
    cluster = info.get("cluster") or {}
    return {
        "streamName": config.get("name"),
        "cluster": cluster.get("name"),
        # A single server names itself leader in INFO but not in LIST: shown only in a
        # cluster, so passes from either request agree and write nothing.
        "leader": cluster.get("leader") if clustered(info) else None,
        "replicaStates": [
            {
                "name": replica.get("name", ""),
                "current": bool(replica.get("current")),
                "lag": replica.get("lag", 0),
            }
            for replica in cluster.get("replicas") or []
        ],
        "replicas": config.get("num_replicas"),
        "bytes": (info.get("state") or {}).get("bytes", 0),
        "size": human_bytes((info.get("state") or {}).get("bytes", 0)),
    }


def stream_live_state(info: dict[str, Any]) -> dict[str, Any]:
    """The status fields that show a stream's live state."""
    state = info.get("state") or {}
    return {
        **_cluster_state(info),
        "messages": state.get("messages", 0),
        "firstSequence": state.get("first_seq", 0),
        "lastSequence": state.get("last_seq", 0),
        "consumerCount": state.get("consumer_count", 0),
    }


def keyvalue_live_state(info: dict[str, Any]) -> dict[str, Any]:
    """A bucket's live state: values and keys rather than messages and subjects."""
    state = info.get("state") or {}
    return {
        **_cluster_state(info),
        "values": state.get("messages", 0),
        "keys": state.get("num_subjects", 0),
        "history": (info.get("config") or {}).get("max_msgs_per_subject"),
    }


def objectstore_live_state(info: dict[str, Any]) -> dict[str, Any]:
    """A store's live state; the object count needs a request of its own (objects_request)."""
    return {**_cluster_state(info), "sealed": bool((info.get("config") or {}).get("sealed"))}


OBJECT_COUNT_OFFSET = 2**31 - 1
"""Asked as the page offset, the server counts the matching subjects and lists none of them."""


def object_count_request(bucket: str) -> dict[str, Any]:
    """The STREAM.INFO request whose reply's `total` is the number of object names."""
    return {"subjects_filter": f"$O.{bucket}.M.>", "offset": OBJECT_COUNT_OFFSET}
