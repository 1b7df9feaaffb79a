"""kopf's peering objects, for active/standby replicas.

kopf pauses its own handlers on a standby replica; the operator's drift watcher is not a kopf
handler, so it asks the same question itself: is a live peer of higher (or equal) priority
around? The answer comes from the ClusterKopfPeering object kopf keeps up to date.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .client import ApiError, KubeApi

PEERING_GROUP = "kopf.dev"
PEERING_VERSION = "v1"
CLUSTER_PEERINGS = "clusterkopfpeerings"


def outranked(
    peers: Mapping[str, Mapping[str, Any]], me: str, priority: int, now: datetime | None = None
) -> bool:
    """Whether a live peer other than us has a higher or equal priority (kopf's own rule)."""
    moment = now or datetime.now(UTC)
    for identity, info in peers.items():
        if identity == me or not isinstance(info, Mapping):
            continue
        lastseen = info.get("lastseen")
        if not lastseen:
            continue
        seen = datetime.fromisoformat(str(lastseen))
        if seen.tzinfo is None:
            seen = seen.replace(tzinfo=UTC)
        if seen + timedelta(seconds=int(info.get("lifetime", 60))) <= moment:
            continue
        if int(info.get("priority", 0)) >= priority:
            return True
    return False


class PeeringCheck:
    """Answers `active()` from the cluster-wide peering object of our peering name."""

    def __init__(self, api: KubeApi, name: str, me: str, priority: int) -> None:
        self._api = api
        self._name = name
        self._me = me
        self._priority = priority

    async def active(self) -> bool:
        try:
            peering: Any = await self._api.request(
                "GET", f"/apis/{PEERING_GROUP}/{PEERING_VERSION}/{CLUSTER_PEERINGS}/{self._name}"
            )
        except ApiError:
            return False  # cannot tell: stay passive rather than act twice
        return not outranked(peering.get("status") or {}, self._me, self._priority)


def peering_crds() -> list[dict[str, Any]]:
    """kopf's peering CRDs (as kopf documents them), for installing HA in tests and dev."""

    def crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{PEERING_GROUP}"},
            "spec": {
                "group": PEERING_GROUP,
                "scope": scope,
                "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                "versions": [
                    {
                        "name": PEERING_VERSION,
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "status": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    }
                                },
                            }
                        },
                    }
                ],
            },
        }

    return [
        crd("ClusterKopfPeering", CLUSTER_PEERINGS, "Cluster"),
        crd("KopfPeering", "kopfpeerings", "Namespaced"),
    ]
