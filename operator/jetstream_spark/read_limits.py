"""How far one read of a range may go before it stops or gives up, and the error it raises."""

from __future__ import annotations

MAX_BYTES_PER_REQUEST = 8 * 1024 * 1024
"""Caps one reply burst, and so a task's memory, whatever the message size."""

RETRIES = 5
"""Timeouts, lost replies or empty answers one range read tolerates before it fails."""


class ReadError(RuntimeError):
    """The server answered a read with an error, or stopped answering."""
