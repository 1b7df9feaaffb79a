"""Publish sample orders to JetStream: JSON on `orders.<customer>`, deduplicated by order id.

python examples/spark/producer.py --servers nats://127.0.0.1:4222 --count 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from dataclasses import asdict, dataclass

import nats


@dataclass(frozen=True)
class Order:
    order_id: str
    customer: str
    amount_cents: int


def sample_orders(count: int, *, customers: int = 8, seed: int = 0) -> list[Order]:
    """Deterministic for a seed, so a test can compute the expected totals."""
    rng = random.Random(seed)
    return [
        Order(f"o-{seed}-{index}", f"c{rng.randrange(customers):03d}", rng.randrange(100, 50_000))
        for index in range(count)
    ]


async def produce(
    servers: str, orders: list[Order], *, subject_prefix: str = "orders", window: int = 500
) -> None:
    """Publish with acks, `window` at a time; the order id as Nats-Msg-Id makes reruns safe."""
    nc = await nats.connect(servers)
    try:
        js = nc.jetstream()
        for start in range(0, len(orders), window):
            acks = [
                await js.publish_async(
                    f"{subject_prefix}.{order.customer}",
                    json.dumps(asdict(order)).encode(),
                    headers={"Nats-Msg-Id": order.order_id},
                )
                for order in orders[start : start + window]
            ]
            await asyncio.gather(*acks)
    finally:
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="nats://127.0.0.1:4222")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--customers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--subject-prefix", default="orders")
    args = parser.parse_args()
    orders = sample_orders(args.count, customers=args.customers, seed=args.seed)
    asyncio.run(produce(args.servers, orders, subject_prefix=args.subject_prefix))
    print(f"published {len(orders)} orders to {args.subject_prefix}.<customer>")


if __name__ == "__main__":
    main()
