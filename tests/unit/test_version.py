"""One version everywhere: `jetstream-operator --version`, the build_info metric and the
package metadata say the same."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from jetstream_operator.metrics import BUILD_INFO, REGISTRY, versions


def test_version_and_build_info_agree_with_the_package() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "jetstream_operator.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    found = versions()
    assert found["version"] == metadata.version("jetstream-operator")
    assert printed.startswith(f"jetstream-operator {found['version']} (kopf {found['kopf']}")
    BUILD_INFO.labels(**found).set(1)
    assert REGISTRY.get_sample_value("jetstream_operator_build_info", found) == 1.0
