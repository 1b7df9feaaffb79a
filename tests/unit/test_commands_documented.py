"""The README's command table and the CLIs agree: every subcommand of `jetstream-operator` and
`kubectl jetstream` has a row, and every row names a subcommand that exists."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from jetstream_operator import cli, kubectl_plugin

README = Path(__file__).resolve().parents[2] / "README.md"


def subcommands(parser: argparse.ArgumentParser) -> set[str]:
    found: set[str] = set()
    for action in parser._actions:  # argparse has no public accessor for its subparsers
        if isinstance(action, argparse._SubParsersAction):
            found |= set(action.choices)
    return found


def documented(program: str) -> set[str]:
    """The first word after `program` in each row of the README's "## Commands" table."""
    section = README.read_text().split("## Commands", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    pattern = re.compile(rf"`{re.escape(program)} ([a-z][a-z-]*)")
    return {match.group(1) for row in rows for match in pattern.finditer(row.split("|")[1])}


def test_every_operator_command_has_a_row_and_every_row_a_command() -> None:
    assert documented("jetstream-operator") == subcommands(cli.build_parser())


def test_every_plugin_command_has_a_row_and_every_row_a_command() -> None:
    assert documented("kubectl jetstream") == subcommands(kubectl_plugin.build_parser())
