"""The NACK field tables and the models agree both ways: every spec field of the NATS-object
kinds is named in its page (a field added without a word for users fails), and every field a
table says we have is a spec field (a renamed or removed field leaves no stale row)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jetstream_operator.api.kinds import ALL_KINDS, ResourceKind

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = {
    "Stream": "nack-compatibility.md",
    "Consumer": "nack-compatibility-consumer.md",
    "KeyValue": "nack-compatibility-buckets.md",
    "ObjectStore": "nack-compatibility-buckets.md",
}


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k.kind in PAGES], ids=lambda k: k.kind)
def test_every_spec_field_is_documented(kind: ResourceKind) -> None:
    page = (DOCS / PAGES[kind.kind]).read_text()
    fields = [f.alias or n for n, f in kind.spec_model.model_fields.items()]
    missing = [f for f in fields if not re.search(rf"\b{re.escape(f)}\b", page)]
    assert not missing, f"spec fields not in docs/{PAGES[kind.kind]}: {missing}"


IDENTIFIER = re.compile(r"[a-z][A-Za-z0-9]*")


def _top_level(cell: str) -> str:
    """The cell without what braces or parentheses hold (nested fields, remarks)."""
    kept, depth = [], 0
    for char in cell:
        if char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
        elif depth == 0:
            kept.append(char)
    return "".join(kept)


def named_fields(nack: str, here: str) -> list[str]:
    """The spec fields a row's "here" column names: "same" repeats the NACK column; otherwise
    its leading field names and the first word of each `code` span."""
    same = here.startswith("same")
    plain = re.sub(r"`[^`]*`", "", _top_level(nack if same else here))
    names = []
    for token in re.split(r"[,/]", plain):
        head = token.strip().removesuffix("[]").split(":")[0].strip()
        if IDENTIFIER.fullmatch(head) and head not in {"a", "or", "same"}:
            names.append(head)
    if not same:
        for code in re.findall(r"`([^`]*)`", here):
            head = code.split(":")[0].strip()
            if IDENTIFIER.fullmatch(head):
                names.append(head)
    return names


def table_rows(page: str) -> list[tuple[str, str]]:
    """(NACK column, here column) of every row of the page's field tables."""
    rows, inside = [], False
    for line in page.splitlines():
        if line.startswith("| NACK field"):
            inside = True
        elif inside and line.startswith("|") and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.split("|")]
            rows.append((cells[1], cells[2]))
        elif not line.startswith("|"):
            inside = False
    return rows


def test_the_row_parser_reads_the_tables_shapes() -> None:
    assert named_fields("placement {cluster, tags}", "same") == ["placement"]
    assert named_fields("maxAge, duplicateWindow", "same") == ["maxAge", "duplicateWindow"]
    assert named_fields("streamName", "streamName, or `streamRef`") == ["streamName", "streamRef"]
    assert named_fields("-", "adoption: Never / IfUnowned") == ["adoption"]
    assert named_fields("x", 'limitMarkerTtl (duration string, e.g. `"10m"`)') == ["limitMarkerTtl"]
    assert named_fields("servers", "a NatsConnection named by `connectionRef`") == ["connectionRef"]


@pytest.mark.parametrize("page", sorted(set(PAGES.values())))
def test_every_field_a_table_names_exists(page: str) -> None:
    kinds = [k for k in ALL_KINDS if PAGES.get(k.kind) == page]
    fields = {f.alias or n for k in kinds for n, f in k.spec_model.model_fields.items()}
    rows = table_rows((DOCS / page).read_text())
    assert len(rows) >= 10, f"no field tables found in docs/{page}"
    stale = [name for row in rows for name in named_fields(*row) if name not in fields]
    assert not stale, f"docs/{page} names fields the models do not have: {stale}"
