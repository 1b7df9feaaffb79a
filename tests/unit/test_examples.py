"""Every example manifest must be valid against the models, so the docs cannot go stale."""

from pathlib import Path

import pytest
import yaml

from jetstream_operator import API_VERSION
from jetstream_operator.api.kinds import ALL_KINDS

_ROOT = Path(__file__).resolve().parents[2] / "examples"
EXAMPLES = sorted(
    [*_ROOT.glob("*.yaml"), *_ROOT.glob("connections/*.yaml"), *_ROOT.glob("accounts/*.yaml")]
)
MODELS = {kind.kind: kind.spec_model for kind in ALL_KINDS}


def test_there_are_examples() -> None:
    assert EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_valid(path: Path) -> None:
    for document in yaml.safe_load_all(path.read_text()):
        if document["apiVersion"] == "v1":
            continue  # a Namespace the example needs
        assert document["apiVersion"] == API_VERSION
        MODELS[document["kind"]].model_validate(document["spec"])
