"""The operator under test as a process, and an admin client: the one place the suites' fixtures
(integration, delivery, Argo CD) start them from, so the settings they run with cannot drift."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from kubernetes import client, config

from jetstream_devtools.crds import install_api
from jetstream_devtools.operator_process import OperatorProcess

# Short resync and retry delays keep the tests quick; production defaults are slower.
SESSION_OPERATOR_ENV = {
    "JETSTREAM_OPERATOR_RESYNC_INTERVAL": "2",
    "JETSTREAM_OPERATOR_CONSUMER_RESYNC_INTERVAL": "2",
    "JETSTREAM_OPERATOR_RETRY_BASE_DELAY": "0.5",
    "JETSTREAM_OPERATOR_RETRY_MAX_DELAY": "5",
    # Live counters follow within a resync; the budget itself is tested with its defaults.
    "JETSTREAM_OPERATOR_STATUS_INTERVAL": "1",
}


def new_client(kubeconfig: Path | str) -> client.ApiClient:
    """A client for one kubeconfig (kubernetes' own helper is untyped)."""
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        str(kubeconfig)
    )
    return api


def admin_client(kubeconfig: Path, with_crds: bool = True) -> client.ApiClient:
    """The suite's admin client, with the operator's CRDs and admission policies installed
    unless a suite brings its own (the chart's)."""
    api = new_client(kubeconfig)
    if with_crds:
        install_api(api)
    return api


@contextlib.contextmanager
def operator_running(kubeconfig: Path, nats_url: str, log_file: Path) -> Iterator[OperatorProcess]:
    """The operator from the checkout with the suite's quick settings, stopped on exit."""
    process = OperatorProcess(kubeconfig, nats_url, log_file, extra_env=SESSION_OPERATOR_ENV)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@contextlib.contextmanager
def operator_variant(
    process: OperatorProcess, nats_url: str | None = None, **env: str
) -> Iterator[OperatorProcess]:
    """Run the session's operator with other settings for one test, then restore it."""
    original_url, original_env = process.nats_url, dict(process.extra_env)
    process.stop()
    process.nats_url = nats_url or original_url
    process.extra_env = {**original_env, **env}
    process.start()
    try:
        yield process
    finally:
        process.stop()
        process.nats_url, process.extra_env = original_url, original_env
        process.start()
