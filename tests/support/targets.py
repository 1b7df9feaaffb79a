"""Where the end-to-end tests run: servers the suite starts itself, or an existing cluster.

With JETSTREAM_OPERATOR_E2E_KUBECONFIG and JETSTREAM_OPERATOR_E2E_NATS_URL both set, the tests
use that API server (the kubeconfig's current context) and that NATS instead of starting their
own; the operator under test still runs as a process on this machine, from this checkout.
Both must be set, so a KUBECONFIG that happens to be exported never sends the tests anywhere.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KUBECONFIG_VARIABLE = "JETSTREAM_OPERATOR_E2E_KUBECONFIG"
NATS_URL_VARIABLE = "JETSTREAM_OPERATOR_E2E_NATS_URL"
IN_CLUSTER_NATS_URL_VARIABLE = "JETSTREAM_OPERATOR_E2E_IN_CLUSTER_NATS_URL"
IMAGE_VARIABLE = "JETSTREAM_OPERATOR_E2E_IMAGE"
LOCAL_ONLY_REASON = (
    "needs servers this suite started itself (it kills, restarts or reads them); "
    "skipped against an existing cluster"
)


@dataclass(frozen=True)
class ExistingCluster:
    """An API server reached through a given kubeconfig (its current context)."""

    kubeconfig: Path
    url: str
    ca_file: Path


@dataclass(frozen=True)
class ExistingNats:
    url: str


@dataclass(frozen=True)
class ExistingTarget:
    kubeconfig: Path
    nats_url: str
    in_cluster_nats_url: str
    image: str


def existing_target(environ: dict[str, str] | None = None) -> ExistingTarget | None:
    """The existing cluster the environment names, or None to start our own servers."""
    values = os.environ if environ is None else environ
    kubeconfig, nats_url = values.get(KUBECONFIG_VARIABLE, ""), values.get(NATS_URL_VARIABLE, "")
    if not kubeconfig and not nats_url:
        return None
    if not (kubeconfig and nats_url):
        raise ValueError(f"set both {KUBECONFIG_VARIABLE} and {NATS_URL_VARIABLE}, or neither")
    return ExistingTarget(
        kubeconfig=Path(kubeconfig).expanduser().resolve(),
        nats_url=nats_url,
        in_cluster_nats_url=values.get(IN_CLUSTER_NATS_URL_VARIABLE, "") or nats_url,
        image=values.get(IMAGE_VARIABLE, ""),
    )


def existing_cluster(kubeconfig: Path, workdir: Path) -> ExistingCluster:
    """The API server address and CA of the kubeconfig's current context."""
    document: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    contexts = {item["name"]: item["context"] for item in document["contexts"]}
    cluster_name = contexts[document["current-context"]]["cluster"]
    cluster = next(c["cluster"] for c in document["clusters"] if c["name"] == cluster_name)
    if "certificate-authority-data" in cluster:
        ca_file = workdir / "ca.crt"
        ca_file.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    else:
        ca_file = (kubeconfig.parent / cluster["certificate-authority"]).resolve()
    return ExistingCluster(kubeconfig, str(cluster["server"]), ca_file)
