"""Status shapes shared by every kind, following the Kubernetes API conventions and kstatus."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ResourceModel


class Condition(ResourceModel):
    """One observation of the resource, as in metav1.Condition."""

    type: str
    """Condition type: Ready, Reconciling or Stalled."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: str
    """A CamelCase word a program can match on."""
    message: str = ""
    """What happened and what a person can do about it."""
    last_transition_time: str
    """When status last changed (RFC 3339)."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The metadata.generation this condition was computed from."""


LAST_HANDLED_FIELD = "status.lastHandledConfiguration"


class OperatorStatus(ResourceModel):
    """What every kind's status starts with."""

    observed_generation: int | None = None
    """The metadata.generation the operator last acted on."""
    conditions: list[Condition] = Field(default_factory=list)
    """Ready, Reconciling and Stalled, following kstatus."""
    last_handled_configuration: str | None = None
    """The spec the operator last acted on, as JSON, to tell what a change changed. Kept in
    status, written with the rest of it, so handling a resource costs one write less than an
    annotation would; not meant for people."""
