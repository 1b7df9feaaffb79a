"""The finalizers and annotations the operator puts on objects or reads from them. One home, so
that the handlers, the chart's admission policy and the tests name the same strings."""

from __future__ import annotations

from . import GROUP

KOPF_ANNOTATION_PREFIX = f"kopf.{GROUP}"
"""kopf's own bookkeeping annotations. kopf ignores changes under its storage prefix, so it must
differ from the prefix of the annotations people set (pause, purge) to keep those visible."""

FINALIZER = f"{GROUP}/finalizer"
PAUSE_ANNOTATION = f"{GROUP}/paused"
SECRET_FINALIZER = f"{GROUP}/in-use"
"""Held on the Secrets of a working NatsConnection until the connection is deleted."""
CONNECTION_SECRET_LABEL = f"{GROUP}/connection-secret"
"""A Secret a connection may use carries it with the value "true": whoever labels a Secret
says it is meant for NATS, so a connection cannot send some other Secret's contents away."""
RELEASE_ANNOTATION = f"{GROUP}/release-finalizer"
"""Set to "true" on a resource being deleted to let it go without touching NATS (NATS gone)."""
METRICS_LABEL = f"{GROUP}/metrics"
"""On a resource or its namespace: "true" gives the resource its own metric series."""
