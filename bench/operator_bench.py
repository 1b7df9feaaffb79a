"""Operator benchmarks: convergence against its floor, idle cost, drift repair, busy streams,
restart, memory; NACK in the same run when its binary is given.

Runs everything on this machine with the project's own servers (kube-apiserver + etcd, one
nats-server, a 3-node cluster for R3 streams) and the operator as a process, so the figures are
end to end. Each size gets fresh servers and a fresh operator, so its memory and idle figures are
its own:

    .venv/bin/python bench/operator_bench.py --sizes 100 1000 5000 --idle-size 1000 --busy 1000
    .venv/bin/python bench/operator_bench.py --sizes 200 --idle-size 200 --idle-seconds 30 \\
        --busy 200 --heap-size 200 --split 200 \\
        --nack-bin /tmp/nack-build/bin/jetstream-controller \\
        --nack-crds /tmp/nack-build/deploy/crds.yml

Prints Markdown (and writes it to bench/results/) for docs/benchmarks.md. Every wait has a
deadline and the whole run has one (--deadline), so a stuck server ends the run with an error
instead of hanging it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import identities
import runner
from harness import APPLY_ORDERS, deadline_guard, save_result
from ours import SPLITS
from report import report
from servers import OPERATOR_ENV, Bench


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 1000])
    parser.add_argument(
        "--idle-size", type=int, default=1000, help="one of --sizes, or 0 for no idle part"
    )
    parser.add_argument("--idle-seconds", type=float, default=120)
    parser.add_argument(
        "--kind-count", type=int, default=20, help="R3 and R1 streams on a connection"
    )
    parser.add_argument("--drift-samples", type=int, default=50)
    parser.add_argument("--restart-seconds", type=float, default=60)
    parser.add_argument(
        "--settle", type=float, default=45, help="seconds watched after the last resource is Ready"
    )
    parser.add_argument("--busy", type=int, help="streams for the busy-streams run")
    parser.add_argument("--busy-seconds", type=float, default=120)
    parser.add_argument("--busy-rate", type=float, default=2000, help="messages/s over all")
    parser.add_argument("--heap-size", type=int, help="N for a tracemalloc run (slow)")
    parser.add_argument("--split", type=int, help="N for a run with two operators")
    parser.add_argument("--split-by", choices=sorted(SPLITS), default="namespaces")
    parser.add_argument("--deadline", type=float, default=4 * 3600, help="seconds for everything")
    parser.add_argument("--nack-bin", type=Path, default=os.environ.get("NACK_BIN"))
    parser.add_argument("--nack-crds", type=Path, default=os.environ.get("NACK_CRDS"))
    parser.add_argument("--nack-sizes", type=int, nargs="+", help="default: --sizes")
    parser.add_argument("--nack-version", help="label for the tables, e.g. v0.22.4-9-gf6dad09")
    parser.add_argument("--nack-modes", nargs="+", default=["legacy", "control-loop"])
    parser.add_argument("--nack-drift-samples", type=int, default=20)
    parser.add_argument("--nack-drift-timeout", type=float, default=90)
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="alternated runs of ours and NACK legacy at --rounds-size, last (needs --nack-bin)",
    )
    parser.add_argument("--rounds-size", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per convergence")
    parser.add_argument(
        "--ideal",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after the floor, the same applies served by bench/ideal_controller.py",
    )
    parser.add_argument(
        "--apiserver-profile",
        type=Path,
        metavar="DIR",
        help="record kube-apiserver's CPU profile while converging, into DIR",
    )
    parser.add_argument("--apiserver-profile-seconds", type=float, default=20)
    parser.add_argument(
        "--keep-logs", type=Path, metavar="DIR", help="copy each run's operator logs into DIR"
    )
    parser.add_argument(
        "--identities",
        choices=identities.MODES,
        default="admin",
        help="workload: flow control on, controllers as a ServiceAccount, applies as a user",
    )
    parser.add_argument(
        "--apply-order",
        choices=APPLY_ORDERS,
        default="kinds",
        help="kinds: every stream, then every consumer; pairs: each stream with its consumer",
    )
    parser.add_argument(
        "--admission-finalizer",
        choices=["on", "off"],
        default="on",
        help="on: the chart's MutatingAdmissionPolicy adds the finalizer at creation (the "
        "chart's default where the API is served); off: the operator patches it in",
    )
    parser.add_argument(
        "--operator-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for every operator of the run, e.g. JETSTREAM_OPERATOR_EVENTS=warnings",
    )
    args = parser.parse_args()
    OPERATOR_ENV.update(pair.split("=", 1) for pair in args.operator_env)
    Bench.identity_mode = args.identities
    Bench.apply_order = args.apply_order
    Bench.admission_finalizer = args.admission_finalizer == "on"
    Bench.profiling = args.apiserver_profile is not None
    if args.sizes and args.idle_size and args.idle_size not in args.sizes:
        parser.error("--idle-size must be one of --sizes, or 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))  # runs the finally: blocks
    deadline_guard(args.deadline)
    rows, extras = runner.run(args)
    text = report(rows, extras, args)
    print(text)
    save_result("operator", text)
    print(json.dumps({"rows": rows, "extras": extras}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
