"""The NATS tools no one on this project wrote, as the tests ask them: the Go JWT library's
validation (`jwtcheck`, github.com/nats-io/jwt/v2) and the `nats` CLI (natscli)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from jetstream_devtools.gobuild import ensure_tools


def jwtcheck(*tokens: str) -> tuple[int, list[dict[str, Any]]]:
    """The exit code and one result per token: type, subject, issuer, issues, error."""
    binary = ensure_tools(["jwtcheck"])["jwtcheck"]
    ran = subprocess.run(
        [str(binary)], input="\n".join(tokens), capture_output=True, text=True, check=False
    )
    assert ran.returncode in (0, 1), ran.stderr
    return ran.returncode, [json.loads(line) for line in ran.stdout.splitlines()]


def account_info(
    url: str, creds: Path, home: Path
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], str]:
    """`nats account info` as the creds' user: the rows of its usage and of its JetStream
    limits (v0.5.0 has no --json for it), and the whole text for messages."""
    binary = ensure_tools(["nats"])["nats"]
    command = [str(binary), "--no-context", "--creds", str(creds), "--server", url]
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home), "PATH": "/usr/bin:/bin"}
    ran = subprocess.run(
        [*command, "account", "info"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    usage, _, limits = ran.stdout.partition("Stream Resource Usage Limits:")
    return rows(usage), rows(limits), ran.stdout


def rows(text: str) -> list[tuple[str, str]]:
    """The "Title: value" rows of the CLI's columns."""
    return re.findall(r"^\s*([A-Z][A-Za-z ]+?): (.*?)\s*$", text, re.MULTILINE)
