"""Everything one operator_bench.py run measures, in order: ours at each size, NACK right after
when its binary is given, then the optional runs. This module imports both contenders, so
neither bench imports the other."""

from __future__ import annotations

import argparse
import json
from typing import Any

import nack_bench
from busy_and_heap import busy, heap
from ours import run_size, run_split


def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of our sizes, and the extras (nack, busy, split, rounds, heap) asked for."""
    rows = [run_size(size, args) for size in args.sizes]
    extras: dict[str, Any] = {}
    if args.nack_bin:  # right after ours, so the comparison shares the machine's conditions
        extras["nack"] = nack_bench.run_all(
            args.nack_bin, args.nack_crds, args.nack_sizes or args.sizes, args
        )
        print(extras["nack"], flush=True)
    if args.busy:
        extras["busy"] = busy(args.busy, args.busy_seconds, args.busy_rate)
        print(json.dumps(extras["busy"]), flush=True)
    if args.split:
        extras["split"] = run_split(args.split, args)
    if args.rounds and args.nack_bin:
        extras["rounds"] = alternated_rounds(args)
    if args.heap_size:
        extras["heap"] = heap(args.heap_size)
        print(json.dumps(extras["heap"]), flush=True)
    return rows, extras


def alternated_rounds(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Ours and NACK legacy at one size, alternated with the order flipped every round, each on
    fresh servers. A single run at N = 1,000 moves by a third with the machine's state, which
    grows run after run (bench/results/diary-2026-11.md), so one run of each, minutes apart,
    cannot call a winner at that size."""
    nack = nack_bench.Nack.inspect(
        args.nack_bin.expanduser(), args.nack_crds.expanduser(), args.nack_version
    )
    plain = argparse.Namespace(**{**vars(args), "idle_size": 0, "sizes": [0]})  # no idle parts
    rounds = []
    for index in range(args.rounds):
        order = ("ours", "nack") if index % 2 == 0 else ("nack", "ours")
        runs: dict[str, Any] = {"first": order[0]}
        for who in order:
            print(f"round {index + 1}: {who} N={args.rounds_size} ...", flush=True)
            if who == "ours":
                runs[who] = run_size(args.rounds_size, plain)
            else:
                runs[who] = nack_bench.run_one(nack, "legacy", args.rounds_size, plain)
            print(json.dumps(runs[who], default=str), flush=True)
        rounds.append(runs)
    return rounds
