"""Layering rules the design depends on, checked from the imports themselves."""

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "operator"


def imported_modules(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (SOURCE / package).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
            elif isinstance(node, ast.ImportFrom) and node.level:
                names.add("." * node.level + (node.module or ""))
        found[str(path.relative_to(SOURCE))] = names
    return found


def test_spark_source_never_imports_kopf_or_the_operator() -> None:
    for path, names in imported_modules("jetstream_spark").items():
        bad = {n for n in names if n.split(".")[0] in ("kopf", "jetstream_operator")}
        assert not bad, f"{path} imports {bad}"


def test_pure_layers_do_no_io() -> None:
    """api/ and reconcile/ decide; they never talk to NATS, Kubernetes or kopf."""
    for path, names in imported_modules("jetstream_operator").items():
        if not path.startswith(("jetstream_operator/api", "jetstream_operator/reconcile")):
            continue
        bad = {n for n in names if n.split(".")[0] in ("kopf", "kubernetes", "nats")}
        bad |= {
            n
            for n in names
            if n.lstrip(".").split(".")[0] in ("nats", "k8s", "handlers") and n.startswith("..")
        }
        assert not bad, f"{path} imports {bad}"


def test_routine_registry_lines_are_dropped_but_not_their_failures() -> None:
    import logging

    from jetstream_operator.cli import quiet_bookkeeping

    def record(level: int, message: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)

    assert not quiet_bookkeeping(record(logging.INFO, "Handler 'remember_stream' succeeded."))
    assert quiet_bookkeeping(record(logging.ERROR, "Handler 'remember_stream' failed."))
    assert quiet_bookkeeping(record(logging.INFO, "Handler 'reconcile' succeeded."))


def test_a_request_kopf_will_retry_is_a_warning_and_one_it_gives_up_on_an_error() -> None:
    """`make run`'s first screen showed an ERROR at every start: lists refused with 429 while
    the API server's storage initializes, retried by kopf a second later."""
    import logging

    from jetstream_operator.cli import retries_are_warnings

    def level(message: str, name: str = "kopf._cogs.clients.watching") -> str:
        record = logging.LogRecord(name, logging.ERROR, __file__, 1, message, None, None)
        assert retries_are_warnings(record)
        return record.levelname

    retried = "Request attempt #1/9 failed; will retry: GET /apis/x -> APITooManyRequestsError()"
    assert level(retried) == "WARNING"
    assert level("Request attempt #9/9 failed; escalating: GET /apis/x -> ...") == "ERROR"
    assert level(retried, name="jetstream_operator.k8s") == "ERROR"  # only kopf's own retries


def test_registry_handlers_run_on_the_event_loop() -> None:
    """kopf runs plain functions in threads; the registries are read by the loop unlocked (a
    thread mutating one made drift repair fail with 'dictionary changed size')."""
    import inspect

    import kopf

    from jetstream_operator import main  # registers the handlers
    from jetstream_operator.api.kinds import CONSUMER
    from jetstream_operator.cli import REGISTRY_HANDLERS
    from jetstream_operator.reconcile.backed import STREAM_BACKED

    registry = kopf.get_default_registry()
    served = {
        handler.selector.any_name
        for handler in registry._changing.get_all_handlers()
        if handler.selector
    }
    if "natsconnections" not in served:
        main.serve_connections(True)  # as the CLI does where connections are managed
    watched = {handler.id for handler in registry._watching.get_all_handlers()}
    if "remember_streams" not in watched:
        main.serve_events(by_workers=False)  # as the CLI does where kopf's worker is not known
    plurals = set()
    for handler in registry._watching.get_all_handlers():
        assert handler.selector is not None
        plurals.add(handler.selector.any_name)
        assert inspect.iscoroutinefunction(handler.fn), handler
        # kopf logs each run as "Handler '<id>' succeeded": the CLI drops those lines by id.
        assert f"Handler '{handler.id}'".startswith(REGISTRY_HANDLERS), handler.id
    kinds = (*(backed.resource for backed in STREAM_BACKED), CONSUMER)
    assert plurals >= {kind.plural for kind in kinds} | {"natsconnections"}


def test_the_operator_process_never_imports_the_kubernetes_client() -> None:
    """The client costs ~20 MiB of the operator's memory; only export and dev tooling use it."""
    import subprocess
    import sys

    check = (
        "import sys; from jetstream_operator.cli import load_operator; load_operator(); "
        "loaded = [n for n, m in sys.modules.items() if m is not None and "
        "(n == 'kubernetes' or n.startswith('kubernetes.'))]; "
        "assert not loaded, loaded"
    )
    finished = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr


def test_the_runtime_package_imports_neither_the_kubernetes_client_nor_the_dev_tools() -> None:
    """Neither is a dependency of the operator's package or image (issue #55), so no import of
    them anywhere in it, at module level or in a function. The one exception: `cli._dev` imports
    both when `jetstream-operator dev` runs, which needs the jetstream-devtools package."""
    for path in (SOURCE / "jetstream_operator").rglob("*.py"):
        tree = ast.parse(path.read_text())
        in_dev = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef) and function.name == "_dev"
            for node in ast.walk(function)
            if path.name == "cli.py"
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = {node.module}
            else:
                continue
            bad = {n for n in names if n.split(".")[0] in ("kubernetes", "jetstream_devtools")}
            assert not bad or id(node) in in_dev, f"{path.relative_to(SOURCE)}:{node.lineno}: {bad}"
