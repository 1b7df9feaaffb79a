"""docs/settings.md is what the settings model says, so a setting cannot go undocumented."""

from __future__ import annotations

from pathlib import Path

from jetstream_operator.settings import OperatorSettings, settings_markdown

DOC = Path(__file__).parents[2] / "docs" / "settings.md"


def test_the_settings_page_is_generated_from_the_model() -> None:
    assert DOC.read_text() == settings_markdown(), (
        "docs/settings.md differs from the settings model: "
        "jetstream-operator settings --markdown > docs/settings.md"
    )
    for name in OperatorSettings.model_fields:
        assert f"`JETSTREAM_OPERATOR_{name.upper()}`" in DOC.read_text()
