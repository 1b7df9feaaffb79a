"""Fairness between namespaces: while namespace A converges a burst of Streams, how long one
Stream applied in namespace B takes to turn Ready (issue 56's goal: within 2 s at p99 over 20
tries, with a burst of 2,000). One operator, one nats-server, the project's own API server:

    .venv/bin/python bench/fairness_bench.py --burst 2000 --tries 20

Each round applies a fresh burst in a namespace of its own (8 at a time, as the other benches
do) and, until the burst is all Ready, applies single Streams in namespace B one after
another, each timed from its create until the API server shows it Ready. Only tries that
started and ended while the burst was still converging count. Prints Markdown and writes it to
bench/results/.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from convergence import stream_body
from harness import deadline_guard, machine, save_result
from servers import OPERATOR_ENV, Bench
from watches import is_ready, wait_ready


def ready_within(bench: Bench, namespace: str, name: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        item = bench.objects.get_namespaced_custom_object(
            bench.group, bench.version, namespace, "streams", name
        )
        if is_ready(dict(item)):  # type: ignore[call-overload]  # the client types it object
            return True
        time.sleep(0.02)
    return False


def one_round(bench: Bench, burst: int, index: int, tries: list[float], wanted: int) -> float:
    """A burst in namespace A, single Streams timed in namespace B meanwhile; returns how long
    the burst took to be all Ready."""
    burst_namespace = bench.namespace(f"burst-{index}")
    single_namespace = bench.namespace("single")
    watch = bench.watch(burst_namespace, "streams")
    bodies = [stream_body(i, f"A{index}") for i in range(burst)]
    applying = threading.Thread(
        target=bench.create_many, args=(burst_namespace, "streams", bodies), daemon=True
    )
    started = time.monotonic()
    applying.start()
    attempt = 0
    while len(tries) < wanted and len(watch.ready) < burst:
        name = f"s{index}-{attempt}"
        body: dict[str, Any] = stream_body(attempt, f"B{index}")
        body["metadata"] = {"name": name}
        began = time.monotonic()
        bench.create_one(single_namespace, "streams", body)
        if not ready_within(bench, single_namespace, name, 120):
            raise TimeoutError(f"{single_namespace}/{name} not Ready within 120 s")
        took = time.monotonic() - began
        if len(watch.ready) < burst:  # still converging when it turned Ready
            tries.append(took)
        attempt += 1
        time.sleep(0.2)
    applying.join()
    last = wait_ready([watch], burst)
    watch.stop()
    return last - started


def report(burst: int, tries: list[float], rounds: list[float], settings: list[str]) -> str:
    ordered = sorted(tries)

    def at(share: float) -> float:
        return ordered[max(0, round(share * len(ordered)) - 1)]

    p99 = (
        statistics.quantiles(ordered, n=100, method="inclusive")[98] if len(ordered) > 1 else at(1)
    )
    lines = [
        f"## Fairness between namespaces, {time.strftime('%Y-%m-%d')}",
        "",
        f"{machine()}. One operator ({', '.join(settings) or 'default settings'}), one "
        "nats-server. While namespace A "
        f"converges {burst:,} Streams (applied 8 at a time), one Stream at a time is applied in "
        "namespace B and timed until Ready; tries that ended after the burst was Ready are not "
        "counted.",
        "",
        "| burst | tries | p50 s | p99 s | max s | burst converged in s (per round) |",
        "|---|---|---|---|---|---|",
        f"| {burst:,} | {len(ordered)} | {statistics.median(ordered):.2f} | {p99:.2f} | "
        f"{ordered[-1]:.2f} | {', '.join(f'{r:.0f}' for r in rounds)} |",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--max-rounds", type=int, default=10)
    parser.add_argument("--deadline", type=float, default=3600)
    parser.add_argument(
        "--operator-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the operator, e.g. JETSTREAM_OPERATOR_WORKERS=0",
    )
    args = parser.parse_args()
    OPERATOR_ENV.update(pair.split("=", 1) for pair in args.operator_env)
    deadline_guard(args.deadline)
    tries: list[float] = []
    rounds: list[float] = []
    with tempfile.TemporaryDirectory(prefix="jso-fairness-") as workdir:
        bench = Bench(Path(workdir))
        try:
            bench.start()
            while len(tries) < args.tries and len(rounds) < args.max_rounds:
                rounds.append(one_round(bench, args.burst, len(rounds), tries, args.tries))
        finally:
            bench.stop()
    if not tries:
        print("no try ended while a burst was converging", file=sys.stderr)
        return 1
    text = report(args.burst, tries, rounds, args.operator_env)
    print(text)
    save_result("fairness", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
