"""One-shot operations requested through annotations (purge, leader step-down), each token
handled exactly once.

A token (any string, e.g. a date) makes the request idempotent: re-applying the same manifest, or
the operator restarting, never purges twice; a new token asks for a new purge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import GROUP

PURGE_ANNOTATION = f"{GROUP}/purge"
PURGE_SUBJECT_ANNOTATION = f"{GROUP}/purge-subject"
PURGE_KEEP_ANNOTATION = f"{GROUP}/purge-keep"
STEP_DOWN_ANNOTATION = f"{GROUP}/step-down"


def pending_token(
    annotations: Mapping[str, str], status: Mapping[str, Any], annotation: str, record: str
) -> str | None:
    """The token of an operation asked for by `annotation` and not yet recorded as done in
    status[`record`]."""
    token = (annotations.get(annotation) or "").strip()
    if not token or (status.get(record) or {}).get("token") == token:
        return None
    return token


def pending_step_down(annotations: Mapping[str, str], status: Mapping[str, Any]) -> str | None:
    return pending_token(annotations, status, STEP_DOWN_ANNOTATION, "lastStepDown")


@dataclass(frozen=True)
class PurgeRequest:
    token: str
    subject: str | None = None
    keep: int | None = None

    def body(self) -> dict[str, Any]:
        """The STREAM.PURGE request body."""
        body: dict[str, Any] = {}
        if self.subject:
            body["filter"] = self.subject
        if self.keep is not None:
            body["keep"] = self.keep
        return body

    def describe(self) -> str:
        scope = f" on {self.subject}" if self.subject else ""
        keep = f", keeping the last {self.keep}" if self.keep is not None else ""
        return f"purge {self.token!r}{scope}{keep}"


class InvalidPurge(ValueError):
    """The purge annotations cannot be understood; nothing is purged for `token`."""

    def __init__(self, token: str, message: str) -> None:
        super().__init__(message)
        self.token = token


def pending_purge(annotations: Mapping[str, str], status: Mapping[str, Any]) -> PurgeRequest | None:
    """The purge asked for and not yet done, if any."""
    token = pending_token(annotations, status, PURGE_ANNOTATION, "lastPurge")
    if token is None:
        return None
    keep_text = (annotations.get(PURGE_KEEP_ANNOTATION) or "").strip()
    keep: int | None = None
    if keep_text:
        if not keep_text.isdigit():
            raise InvalidPurge(
                token,
                f"{PURGE_KEEP_ANNOTATION} must be a whole number of messages, not {keep_text!r}",
            )
        keep = int(keep_text)
    subject = (annotations.get(PURGE_SUBJECT_ANNOTATION) or "").strip() or None
    return PurgeRequest(token, subject, keep)
