"""The connection pool forgets targets nothing uses any more, also those that never connected."""

import pytest

from jetstream_devtools.paths import free_port
from jetstream_operator.nats.pool import ConnectFailure, ConnectionPool, ConnectionTarget


async def test_retain_forgets_a_target_that_never_connected() -> None:
    pool = ConnectionPool(connect_timeout=1)
    nowhere = ConnectionTarget(servers=(f"nats://127.0.0.1:{free_port()}",), label="nowhere")
    with pytest.raises(ConnectFailure):
        await pool.connection(nowhere)
    assert nowhere in pool._locks
    await pool.retain([nowhere])
    assert nowhere in pool._locks  # still wanted: kept for the next attempt
    await pool.retain([])
    assert nowhere not in pool._locks
    await pool.close()
