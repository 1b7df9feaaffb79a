"""The `kubectl get` outputs the docs show have the columns the CRDs define, so a column added,
renamed or moved to `-o wide` in the models cannot leave a stale example behind."""

from __future__ import annotations

import re
from pathlib import Path

from jetstream_operator.api.kinds import ALL_KINDS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BY_PLURAL = {kind.plural: kind for kind in ALL_KINDS}


def shown_headers(text: str) -> list[tuple[str, list[str]]]:
    """(plural, header words) for each `$ kubectl get <plurals>` in a console block; a command
    naming several kinds prints one header per kind, in order."""
    found: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        command = re.match(r"\$ kubectl get ([a-z,]+)(?: |$)", line)
        if not command or "-o" in line.split():
            continue
        plurals = command[1].split(",")
        headers = []
        for following in lines[number + 1 :]:
            if following.startswith("$") or following.startswith("```"):
                break
            if following.startswith("NAME "):
                headers.append(following.split())
        found += list(zip(plurals, headers, strict=True))
    return found


def test_every_shown_kubectl_get_has_the_crds_columns() -> None:
    checked = 0
    for page in PAGES:
        for plural, header in shown_headers(page.read_text()):
            kind = BY_PLURAL[plural]
            columns = [c.name.upper() for c in kind.columns if c.priority == 0]
            assert header == ["NAME", *columns], (page.name, plural, header)
            checked += 1
    assert checked >= 5, checked
