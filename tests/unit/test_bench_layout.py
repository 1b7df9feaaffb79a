"""bench/'s layout, checked from its sources: every module small enough to read, and imports
that never go in a circle (the NACK bench once imported the operator bench, and back)."""

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
LONGEST = 600


def bench_imports() -> dict[str, set[str]]:
    """Each bench module's imports of other bench modules, at module level or inside functions:
    scripts run with bench/ on sys.path, so they import each other by bare name."""
    modules = {path.stem: path for path in BENCH.glob("*.py")}
    found: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module.split(".")[0])
        found[name] = imported & modules.keys()
    return found


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of imports, as the modules along it, or [] when there is none."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        for imported in sorted(graph[module]):
            if found := visit(imported, [*path, module]):
                return found
        done.add(module)
        return []

    for module in sorted(graph):
        if found := visit(module, []):
            return found
    return []


def test_no_bench_module_imports_itself_back() -> None:
    graph = bench_imports()
    assert {"harness", "operator_bench", "nack_bench"} <= graph.keys()
    assert not cycle(graph), " -> ".join(cycle(graph))


def test_the_operator_and_nack_benches_share_the_harness_not_each_other() -> None:
    graph = bench_imports()
    assert "nack_bench" not in graph["operator_bench"]
    assert "operator_bench" not in graph["nack_bench"]
    assert "operator_bench" not in set().union(*graph.values())


def test_cycle_finds_a_circle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []


def test_no_bench_module_is_over_600_lines() -> None:
    long = {
        path.name: lines
        for path in BENCH.glob("*.py")
        if (lines := len(path.read_text().splitlines())) > LONGEST
    }
    assert not long, long
