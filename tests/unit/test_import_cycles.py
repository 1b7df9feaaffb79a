"""No import cycle in the project's packages (the operator, the Spark data source, the dev
tools), counting every import: those inside functions and under TYPE_CHECKING too, since a cycle
hidden there still ties two modules' designs together. bench/ has its own check
(test_bench_layout.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "jetstream_operator": ROOT / "operator",
    "jetstream_spark": ROOT / "operator",
    "jetstream_devtools": ROOT / "devtools",
}


def module_name(path: Path) -> str:
    source = next(root for package, root in PACKAGES.items() if (root / package) in path.parents)
    parts = list(path.relative_to(source).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names} & known
            # `from package import module` needs the module, not what the package's own
            # __init__ re-exports; any other name comes from `target` itself.
            found |= submodules
            if len(submodules) < len(node.names):
                found.add(target)
    return {each for each in found if each in known and each != name}


def import_graph() -> dict[str, set[str]]:
    paths = [path for package, root in PACKAGES.items() for path in (root / package).rglob("*.py")]
    known = {module_name(path) for path in paths}
    return {module_name(path): imports_of(path, known) for path in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_checker_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_the_projects_packages() -> None:
    graph = import_graph()
    assert "jetstream_operator.passes.envelope" in graph  # the walk found the packages
    assert "jetstream_devtools.controlplane" in graph
    assert graph["jetstream_operator.main"]  # and their imports
    assert cycles(graph) == []
