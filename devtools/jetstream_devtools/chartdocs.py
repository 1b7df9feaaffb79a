"""The chart README's values tables, generated from values.yaml and values.schema.json.

The schema's `description` of each value is the one text about it: `helm` validates against the
schema, editors show it, and the README's tables are this module's output, which a test compares
with the committed README (`python -m jetstream_devtools.chartdocs --write` rewrites them).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from .paths import CHART_DIR

CHART = CHART_DIR
README = CHART / "README.md"
BEGIN = "<!-- values: generated from values.yaml and values.schema.json; "
BEGIN += "python -m jetstream_devtools.chartdocs --write -->"
END = "<!-- end of generated values -->"
# Kubernetes structures documented as one value, not key by key.
WHOLE = frozenset(
    {"resources", "podSecurityContext", "securityContext", "livenessProbe", "readinessProbe"}
)
# The README's headings, by top-level key; every top-level key must be in one.
SECTIONS: dict[str, tuple[str, ...]] = {
    "Image and naming": ("image", "imagePullSecrets", "nameOverride", "fullnameOverride"),
    "Operator and NATS": ("replicaCount", "nats", "operator", "watchNamespaces", "selector"),
    "RBAC, ServiceAccount, CRDs": (
        "admissionFinalizer",
        "rbac",
        "serviceAccount",
        "crds",
        "peering",
        "podDisruptionBudget",
    ),
    "Metrics": ("metrics", "prometheusRule", "dashboard"),
    "NetworkPolicy": ("networkPolicy",),
    "Pod": (
        "resources",
        "podSecurityContext",
        "securityContext",
        "livenessProbe",
        "readinessProbe",
        "terminationGracePeriodSeconds",
        "podAnnotations",
        "podLabels",
        "commonLabels",
        "nodeSelector",
        "affinity",
        "tolerations",
        "topologySpreadConstraints",
        "priorityClassName",
        "extraEnv",
        "extraEnvFrom",
        "extraVolumes",
        "extraVolumeMounts",
    ),
}


class UndocumentedValue(ValueError):
    """A value without a description in the schema, or a top-level key in no section."""


def value_keys(values: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, default) of every documented value, in values.yaml's order."""
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value and dotted not in WHOLE:
            yield from value_keys(value, f"{dotted}.")
        else:
            yield dotted, value


def _description(schema: dict[str, Any], dotted: str) -> str:
    node = schema
    for part in dotted.split("."):
        node = node.get("properties", {}).get(part, {})
    description = node.get("description")
    if not description:
        raise UndocumentedValue(f"{dotted} has no description in values.schema.json")
    return str(description).replace("|", "\\|")


def _shown(default: Any) -> str:
    if isinstance(default, str):
        return f"`{default}`" if default else '`""`'
    flow = yaml.safe_dump(default, default_flow_style=True, width=10_000).strip()
    return f"`{flow.removesuffix('...').strip()}`"


def values_markdown(chart: Path = CHART) -> str:
    """The generated part of the README: one table per section, between the markers."""
    values = yaml.safe_load((chart / "values.yaml").read_text())
    schema = json.loads((chart / "values.schema.json").read_text())
    placed = {key for keys in SECTIONS.values() for key in keys}
    unplaced = [key for key in values if key not in placed]
    if unplaced:
        raise UndocumentedValue(f"top-level values in no README section: {unplaced}")
    rows = list(value_keys(values))
    lines = [BEGIN]
    for title, tops in SECTIONS.items():
        lines += ["", f"### {title}", "", "| key | default | description |", "|---|---|---|"]
        for dotted, default in rows:
            if dotted.split(".")[0] in tops:
                lines.append(f"| `{dotted}` | {_shown(default)} | {_description(schema, dotted)} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def rewritten_readme(readme: str, generated: str) -> str:
    """The README with its generated part replaced; the markers must be there already."""
    start, end = readme.index(BEGIN), readme.index(END) + len(END) + 1
    return readme[:start] + generated + readme[end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jetstream_devtools.chartdocs")
    parser.add_argument("--write", action="store_true", help="rewrite the chart's README")
    args = parser.parse_args(argv)
    generated = values_markdown()
    if args.write:
        README.write_text(rewritten_readme(README.read_text(), generated))
    else:
        sys.stdout.write(generated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
