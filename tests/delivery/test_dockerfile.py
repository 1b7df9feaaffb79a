"""The Dockerfile: hadolint-clean, pinned, multi-stage, non-root.

No container engine runs where these tests run (CI here has none), so the image is not built
unless `docker` or `podman` is on PATH; `test_image_builds` says so by being skipped.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .helpers import ROOT, run

DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"
PIN = re.compile(r"^\s+([A-Za-z0-9._-]+)==([^\s\\]+)\s*\\?$")


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def _runtime_pins() -> dict[str, Version]:
    """Pins of the first `pip install --no-deps` (the runtime dependencies)."""
    text = DOCKERFILE.read_text()
    block = text[text.index("RUN pip install --no-deps") : text.index("&& pip check")]
    pins: dict[str, Version] = {}
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        match = PIN.match(line)
        assert match, f"not a pin: {line!r}"
        pins[canonicalize_name(match[1])] = Version(match[2])
    return pins


def _runtime_closure() -> set[str]:
    """Every distribution `pip install .` needs at runtime, from the installed metadata."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    seen: set[str] = set()
    todo = [Requirement(item) for item in project["dependencies"]]
    while todo:
        requirement = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        todo += [Requirement(item) for item in importlib.metadata.requires(name) or []]
    return seen


def test_hadolint_is_clean() -> None:
    linted = run([HADOLINT, "--no-color", DOCKERFILE])
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert linted.stdout.strip() == ""


def test_runtime_dependencies_are_all_pinned_within_pyproject() -> None:
    pins = _runtime_pins()
    assert set(pins) == _runtime_closure()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for item in project["dependencies"]:
        requirement = Requirement(item)
        pinned = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(pinned), f"{pinned} does not satisfy {item}"


def test_image_shape() -> None:
    instructions = _instructions()
    stages = [args for keyword, args in instructions if keyword == "FROM"]
    assert len(stages) == 2 and stages[0].endswith(" AS build")
    args = dict(a.split("=", 1) for k, a in instructions if k == "ARG" and "=" in a)
    assert re.fullmatch(r"python:3\.11[.0-9]*-slim(-\w+)?", args["PYTHON_IMAGE"])
    final = instructions[len(instructions) - instructions[::-1].index(("FROM", stages[1])) :]
    final_text = " ".join(f"{k} {a}" for k, a in final)
    # Only the virtualenv crosses over; no compiler or pip install in the final stage.
    assert "COPY --from=build /opt/venv /opt/venv" in final_text
    assert "pip install" not in final_text and "apt-get" not in final_text
    user = [a for k, a in final if k == "USER"]
    assert user == ["10001:10001"]
    assert ("ENTRYPOINT", '["jetstream-operator", "run"]') in final


def test_dockerignore_sends_only_what_the_build_reads() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[lines.index("*") :][:4] == ["*", "!pyproject.toml", "!README.md", "!operator/"]


def _container_engine() -> str | None:
    """docker or podman, if one is installed and its daemon (or podman itself) answers."""
    for name in ("docker", "podman"):
        binary = shutil.which(name)
        if binary and run([binary, "info"], timeout=20).returncode == 0:
            return binary
    return None


def test_image_builds() -> None:
    engine = _container_engine()
    if engine is None:
        pytest.skip("no working container engine here: the image is linted, not built")
    built = run([engine, "build", "--tag", "jetstream-operator:test", ROOT], timeout=1800)
    assert built.returncode == 0, built.stderr[-3000:]
    version = run(
        [
            engine,
            "run",
            "--rm",
            "--entrypoint",
            "jetstream-operator",
            "jetstream-operator:test",
            "--help",
        ]
    )
    assert version.returncode == 0, version.stderr
