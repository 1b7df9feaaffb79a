"""Secrets the operator writes itself: an account's keys (in the operator's namespace) and a
user's creds file (in the user's namespace). Written by server-side apply, so a write needs no
read first: the operator never reads a team's Secret, only the account keys it made."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from ..marks import CONNECTION_SECRET_LABEL
from .client import ApiError, KubeApi

APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "jetstream-operator"
MANAGED_BY = {"app.kubernetes.io/managed-by": "jetstream-operator"}


def _path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/secrets"
    return f"{base}/{name}" if name else base


class NotOurs(Exception):
    """A Secret of the name exists, and nothing says the operator made it."""


class OwnedSecrets:
    """Apply, read and delete the Secrets the operator made."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api

    async def read(self, namespace: str, name: str) -> dict[str, str] | None:
        """Our Secret's values as text; None when it does not exist."""
        try:
            secret = await self._api.request("GET", _path(namespace, name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        data = secret.get("data") or {}
        return {key: base64.b64decode(value).decode() for key, value in data.items()}

    async def apply(
        self,
        namespace: str,
        name: str,
        values: Mapping[str, str],
        *,
        labels: Mapping[str, str] | None = None,
        owner: Mapping[str, Any] | None = None,
        connection_secret: bool = False,
        fresh: bool = False,
    ) -> None:
        """Create or replace the Secret's values (and only the fields we manage). `fresh`: the
        Secret must not exist yet (NotOurs if it does), so a name chosen in a spec never takes
        over, and with its owner reference deletes, a Secret someone else made."""
        all_labels = {**MANAGED_BY, **(labels or {})}
        if connection_secret:
            all_labels[CONNECTION_SECRET_LABEL] = "true"
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": all_labels}
        if owner is not None:
            metadata["ownerReferences"] = [dict(owner)]
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": "Opaque",
            "data": {
                key: base64.b64encode(value.encode()).decode() for key, value in values.items()
            },
        }
        if fresh:
            try:
                await self._api.request(
                    "POST", f"{_path(namespace)}?fieldManager={FIELD_MANAGER}", body
                )
                return
            except ApiError as error:
                if error.status == 409:
                    raise NotOurs(
                        f"Secret {namespace}/{name} exists and was not made for this resource: "
                        "choose another name (spec.secretName) or delete that Secret"
                    ) from None
                raise
        await self._api.request(
            "PATCH",
            f"{_path(namespace, name)}?fieldManager={FIELD_MANAGER}&force=true",
            body,
            content_type=APPLY_PATCH,
        )

    async def _created(
        self, namespace: str, name: str, body: Mapping[str, Any], owner: Mapping[str, Any] | None
    ) -> bool:
        """Create the Secret; where one exists, whether it is already the owner's (a status
        lost after the creation): only then is its owner reference read, never its data."""
        try:
            await self._api.request(
                "POST", f"{_path(namespace)}?fieldManager={FIELD_MANAGER}", body
            )
            return True
        except ApiError as error:
            if error.status != 409:
                raise
        existing = await self._api.request("GET", _path(namespace, name))
        references = (existing.get("metadata") or {}).get("ownerReferences") or []
        uid = (owner or {}).get("uid")
        return uid is not None and any(item.get("uid") == uid for item in references)


def owner_reference(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    """Kubernetes deletes the Secret with its owner (the garbage collector)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }
