"""The `jetstream-operator` command: run the operator, print the CRDs, manage a dev environment,
export what exists."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

DEFAULT_DEV_DIR = Path(".dev")
EVERY_NAMESPACE_JSON = "{}"
"""A label selector selecting every namespace (JETSTREAM_OPERATOR_NAMESPACE_SELECTOR)."""
REGISTRY_HANDLERS = ("Handler 'remember_",)
"""kopf logs every watch event these bookkeeping handlers see; that is noise, and costly."""


def quiet_bookkeeping(record: logging.LogRecord) -> bool:
    """Drop kopf's routine lines about the registry handlers, keep their warnings and errors."""
    return record.levelno >= logging.WARNING or not record.getMessage().startswith(
        REGISTRY_HANDLERS
    )


def retries_are_warnings(record: logging.LogRecord) -> bool:
    """kopf logs a Kubernetes request it will retry as an ERROR (at every start, lists refused
    with 429 while the API server's storage initializes): a WARNING until it gives up, which
    stays an ERROR ("escalating")."""
    if (
        record.levelno == logging.ERROR
        and record.name.startswith("kopf._cogs.clients")
        and "failed; will retry" in record.getMessage()
    ):
        record.levelno, record.levelname = logging.WARNING, "WARNING"
    return True


HIDDEN_CLIENT = "kubernetes"
"""The `kubernetes` client, which the operator does not depend on but a checkout installs for the
dev tools and tests: kopf imports it whenever it is installed (to recognise its model classes and
to log in through it), which cost the operator about a third of its start-up RSS (92-96 -> 61 MiB)
for nothing: the operator logs in and makes its requests itself (k8s/login.py, k8s/throttle.py,
k8s/client.py). Hidden as a guard for wherever it is installed."""

DEVTOOLS_MISSING = (
    "jetstream-operator dev needs the jetstream-devtools package: "
    "pip install -e ./devtools from a checkout"
)


YOUNG_COLLECTION_THRESHOLD = 10_000
"""Net container allocations between the cyclic collector's young collections (Python's default
is 700). A burst of new resources allocates heavily and keeps much of it, so at the default the
collector ran ever more full collections over an ever larger heap: while 10,000 resources
converged, 15 full ones among 2,000 others, 6.9 of the operator's 33.6 CPU seconds
(gc.callbacks); 0.8-1.1 s of 5-6.5 at 2,000. At 10,000, 1.8 s and 0.3-0.5 s, no full
collection. The price is RSS, as garbage waits longer for its collection: +2 MiB at 2,000
resources (four runs each), +9 MiB at 10,000 (one run each); bench/results/diary-2026-11.md,
2026-11-28 07:36."""


def collect_garbage_less_often() -> None:
    """Fewer, larger young collections: fewer objects live long enough to be promoted and
    scanned again by the older generations' collections."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, middle, oldest)


def settings_problems(error: ValidationError) -> str:
    """A refused setting named by its environment variable, without pydantic's traceback."""
    lines = []
    for problem in error.errors():
        field = ".".join(str(part) for part in problem["loc"])
        message = problem["msg"].removeprefix("Value error, ")
        lines.append(f"jetstream-operator: JETSTREAM_OPERATOR_{field.upper()}: {message}")
    return "\n".join(lines)


def load_operator() -> ModuleType:
    """Import the operator's handlers (registering them with kopf), hiding the `kubernetes`
    client from kopf; any import of it in the operator fails here rather than costing memory."""
    if HIDDEN_CLIENT not in sys.modules:
        sys.modules[HIDDEN_CLIENT] = None  # type: ignore[assignment]  # import refused
    from . import main

    return main


def _run(args: argparse.Namespace) -> int:
    handlers = load_operator()
    import kopf
    from pydantic import ValidationError

    from .kopf_adaptations import STREAMLINED_WORKERS, adapt_kopf
    from .memory import shrink_tls_read_buffers
    from .services import SharedMemo
    from .settings import OperatorSettings

    try:
        settings = OperatorSettings()
    except ValidationError as error:
        print(settings_problems(error), file=sys.stderr)
        return 2
    handlers.serve_connections(settings.manage_connections)
    collect_garbage_less_often()
    shrink_tls_read_buffers()
    adapted = adapt_kopf()
    handlers.serve_events(by_workers=adapted[STREAMLINED_WORKERS.name])
    # kopf's formatter names the resource (namespace/name) on every line it logs for one;
    # JSON puts it in fields ("object") for log pipelines.
    kopf.configure(
        verbose=args.verbose,
        log_format=kopf.LogFormat.JSON if settings.log_format == "json" else kopf.LogFormat.FULL,
        log_prefix=settings.log_format != "json",
        log_refkey="object" if settings.log_format == "json" else None,
    )
    if not args.verbose:
        logging.getLogger("kopf.objects").addFilter(quiet_bookkeeping)
    for handler in logging.getLogger().handlers:
        handler.addFilter(retries_are_warnings)
    if settings.peering:
        # kopf takes its peer identity from POD_ID; the drift watcher needs to know it too.
        os.environ.setdefault("POD_ID", f"{socket.gethostname()}-{os.getpid()}")
    kopf.run(
        clusterwide=not settings.namespaces,
        namespaces=settings.kopf_namespace_patterns(),
        liveness_endpoint=args.liveness,
        standalone=not settings.peering,
        peering_name=settings.peering,
        priority=settings.priority,
        memo=SharedMemo(),
    )
    return 0


def _reasons(args: argparse.Namespace) -> int:
    from .reasons import reasons_table

    print(reasons_table(), end="")
    return 0


def _settings(args: argparse.Namespace) -> int:
    from .settings import settings_markdown

    print(settings_markdown(), end="")
    return 0


def _crds(args: argparse.Namespace) -> int:
    from .api.crdgen import crd_files, write_crds

    if args.write:
        for path in write_crds(Path(args.write)):
            print(path)
        return 0
    print("---\n".join(crd_files().values()), end="")
    return 0


def _dev(args: argparse.Namespace) -> int:
    # The one import of the dev tools (and, through them, the `kubernetes` client) from the
    # operator's package: lazy, so neither is needed to run or export.
    try:
        from jetstream_devtools import environment
    except ModuleNotFoundError as missing:
        if missing.name != "jetstream_devtools":
            raise
        print(DEVTOOLS_MISSING, file=sys.stderr)
        return 2

    state_dir = Path(args.state_dir)
    if args.action == "up":
        from kubernetes import config

        from jetstream_devtools.crds import install_api

        context = Path(args.image_context) if args.node else None
        state = environment.up(
            state_dir, with_cluster=args.cluster, node_image_context=context, auth=args.auth
        )
        api_client = config.new_client_from_config(str(state.kubeconfig))  # type: ignore[no-untyped-call]
        install_api(api_client)
        print(f"export KUBECONFIG={state.kubeconfig.resolve()}")
        print(f"export NATS_URL={state.nats_url}")
        print(f"export JETSTREAM_OPERATOR_NATS_URL={state.nats_url}")
        # One team on a workstation: the default connection serves every namespace.
        print(f"export JETSTREAM_OPERATOR_NAMESPACE_SELECTOR='{EVERY_NAMESPACE_JSON}'")
        for line in environment.auth_exports(state):
            print(line)
        if state.node_image:
            repository, tag = state.node_image.rsplit(":", 1)
            print(
                f"# {state.node_image} is loaded into the node; install the chart with "
                f"--set image.repository={repository},image.tag={tag},nats.url={state.nats_url} "
                f"--set-json 'nats.namespaceSelector={EVERY_NAMESPACE_JSON}'"
            )
        return 0
    if args.action == "status":
        report = environment.status(state_dir)
        print(report.describe())
        return 0 if report.healthy else 1
    environment.down(state_dir)
    print("dev environment stopped")
    return 0


def _export(args: argparse.Namespace) -> int:
    from .export.command import run_export

    return run_export(args)


def version_line() -> str:
    """`jetstream-operator 0.1.0 (kopf 1.45.2, nats-py 2.16.0, Python 3.11.7)`: what the
    build_info metric says too."""
    from .metrics import versions

    found = versions()
    return (
        f"jetstream-operator {found['version']} (kopf {found['kopf']}, nats-py "
        f"{found['nats_py']}, Python {found['python']})"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jetstream-operator", description=__doc__)
    parser.add_argument("--version", action="version", version=version_line())
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the operator against the current kubeconfig")
    run.add_argument("--verbose", action="store_true", help="debug logging")
    run.add_argument(
        "--liveness",
        default=None,
        help="health endpoint, e.g. http://0.0.0.0:8080/healthz (off when unset)",
    )
    run.set_defaults(handler=_run)

    reasons = commands.add_parser(
        "reasons", help="print the table of condition reasons of docs/conditions.md"
    )
    reasons.set_defaults(handler=_reasons)
    settings = commands.add_parser("settings", help="print every setting as docs/settings.md")
    settings.add_argument("--markdown", action="store_true", help="as Markdown (the default)")
    settings.set_defaults(handler=_settings)
    crds = commands.add_parser("crds", help="print the CRDs (or write them with --write DIR)")
    crds.add_argument("--write", metavar="DIR", help="write one file per CRD into DIR")
    crds.set_defaults(handler=_crds)

    dev = commands.add_parser("dev", help="a local control plane and NATS for trying things out")
    dev.add_argument("action", choices=["up", "down", "status"])
    dev.add_argument("--state-dir", default=str(DEFAULT_DEV_DIR), help="where state is kept")
    dev.add_argument("--cluster", action="store_true", help="also start a 3-node NATS cluster")
    dev.add_argument(
        "--node",
        action="store_true",
        help="a one-node Kubernetes (kubelet, containerd, scheduler, kube-proxy) with the image "
        "built from --image-context loaded into it (needs root; installs Debian packages)",
    )
    dev.add_argument(
        "--image-context", default=".", help="the checkout to build the image from (--node)"
    )
    dev.add_argument(
        "--auth",
        choices=["none", "jwt"],
        default="none",
        help="jwt: NATS in operator mode (accounts and users as JWTs), its system user's creds "
        "and the operator's signing key in the state dir and in Secrets",
    )
    dev.set_defaults(handler=_dev)

    export = commands.add_parser(
        "export",
        help="write Stream and Consumer manifests adopting what a NATS account holds, or "
        "convert NACK manifests (--from-nack)",
    )
    export.add_argument("--server", help="NATS URLs (default: JETSTREAM_OPERATOR_NATS_URL)")
    export.add_argument(
        "--connection", metavar="NS/NAME", help="read through this NatsConnection (kubeconfig)"
    )
    export.add_argument("--namespace", help="metadata.namespace of the manifests")
    export.add_argument("--match", default="*", help="only streams whose name matches this glob")
    export.add_argument("--output-dir", help="one file per object here (default: YAML on stdout)")
    export.add_argument(
        "--from-nack", metavar="FILE|DIR|-", help="convert NACK Stream and Consumer manifests"
    )
    export.add_argument(
        "--strict", action="store_true", help="exit 1 when anything could not be converted"
    )
    export.set_defaults(handler=_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
