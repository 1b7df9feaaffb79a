"""docs/settings.md and the reason table of docs/conditions.md are what the code says, so a
setting or a reason cannot go undocumented or drift."""

from __future__ import annotations

from pathlib import Path

from jetstream_operator.reasons import reasons_table
from jetstream_operator.settings import OperatorSettings, settings_markdown

DOCS = Path(__file__).parents[2] / "docs"
DOC = DOCS / "settings.md"


def test_the_settings_page_is_generated_from_the_model() -> None:
    assert DOC.read_text() == settings_markdown(), (
        "docs/settings.md differs from the settings model: "
        "jetstream-operator settings --markdown > docs/settings.md"
    )
    for name in OperatorSettings.model_fields:
        assert f"`JETSTREAM_OPERATOR_{name.upper()}`" in DOC.read_text()


def test_the_reasons_table_is_generated_from_the_code() -> None:
    assert reasons_table() in (DOCS / "conditions.md").read_text(), (
        "docs/conditions.md's table differs from jetstream_operator/reasons.py: replace it with "
        "the output of `jetstream-operator reasons`"
    )
