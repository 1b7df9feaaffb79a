"""Every spec field of the NATS-object kinds is named in their page of the NACK field tables, so
a field added to a model without a word for users fails here."""

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
