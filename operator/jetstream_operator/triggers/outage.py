"""Showing on resources' status what the drift watcher cannot see: NATS not answering at all,
or streams a listing returned without their state. Both say Reconciling, not Stalled, and only
after a grace, so a blip or a leader answering late writes nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from ..api.kinds import CONSUMER
from ..handlers.registry import consumers_of, declaring
from ..handlers.results import Result, unavailable
from ..nats.jsapi import JetStreamUnavailable
from ..passes.repair import Repairer, needs_care
from ..reconcile.conditions import Outcome

logger = logging.getLogger(__name__)

OUTAGE_GRACE = 15.0
"""Seconds NATS may be unreachable before resources show it (at most three resyncs): a blip
writes nothing."""
UNSEEN_RESYNCS = 2
"""Listings in a row that could not see a stream's state before its status says so: one such
listing can be a leader answering late."""


class OutageDisplay:
    """Remembers how long NATS or a stream has been out of sight, and says so once per outage."""

    def __init__(self, repairer: Repairer) -> None:
        self._repairer = repairer
        self._outage_since = 0.0
        self._outage_shown = False
        self._unseen: dict[str, int] = {}  # stream: listings in a row without its state

    async def unavailable(self, error: JetStreamUnavailable, interval: float) -> None:
        """A pass failed for want of NATS; past the grace, every resource says so."""
        loop = asyncio.get_running_loop()
        self._outage_since = self._outage_since or loop.time()
        grace = min(OUTAGE_GRACE, 3 * interval)
        if not self._outage_shown and loop.time() - self._outage_since >= grace:
            self._outage_shown = True
            await self._show_outage(error)

    def answered(self) -> None:
        """A pass went through: the next failure starts a new outage."""
        self._outage_since, self._outage_shown = 0.0, False

    async def _show_outage(self, error: JetStreamUnavailable) -> None:
        """NATS has not answered for a while: every resource of this connection says so
        (Reconciling, not Stalled), once per outage; the first resync afterwards says Ready."""
        repairer = self._repairer
        result = unavailable(error)
        for kind, registry in repairer.registries():
            for resource in registry:
                if needs_care(resource) and repairer.belongs(resource):
                    await repairer.write_status(kind, resource, result)

    def seen_again(self, unseen: Mapping[str, str]) -> list[str]:
        """Streams a listing sees again after their status said they were unseen: they are to
        be looked at at once, as after an advisory."""
        back = [name for name in self._unseen if name not in unseen]
        return [name for name in back if self._unseen.pop(name) >= UNSEEN_RESYNCS]

    async def show_unseen(self, unseen: Mapping[str, str]) -> None:
        """Streams the cluster listed without their state (servers offline, or no answer)
        keep their status; after `UNSEEN_RESYNCS` listings in a row their resources and their
        consumers say so (Reconciling, not Stalled)."""
        repairer = self._repairer
        for name, reason in unseen.items():
            self._unseen[name] = self._unseen.get(name, 0) + 1
            if self._unseen[name] != UNSEEN_RESYNCS:
                continue
            logger.info("stream %s unseen in %d listings: %s", name, UNSEEN_RESYNCS, reason)
            why = reason or "its servers are offline or did not answer in time"
            message = (
                f"NATS could not report stream {name}: {why}. Status shows what it last "
                "reported; it is looked at again at every resync."
            )
            result = Result(Outcome(False, "StreamOffline", message), retry=True)
            holders = [
                (kind.resource, resource) for kind, resource in declaring(name, repairer.backed)
            ]
            users = consumers_of(name, repairer.consumers, repairer.streams)
            for kind, resource in [*holders, *((CONSUMER, user) for user in users)]:
                if needs_care(resource) and repairer.belongs(resource):
                    await repairer.write_status(kind, resource, result)
