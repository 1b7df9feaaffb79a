"""Our operator's bench: fresh servers (kube-apiserver + etcd, one nats-server, a 3-node cluster
when asked) and one operator process or more, with the run's settings."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import Servers, rss_mib, servers_cpu_seconds
from kubernetes import client
from watches import ObjectWatch

from jetstream_devtools import admission
from jetstream_devtools.crds import install_api
from jetstream_devtools.figures import counts_by_labels, scrape
from jetstream_devtools.gobuild import ensure_tools
from jetstream_devtools.natsserver import NatsCluster
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_devtools.paths import free_port

OPERATOR_ENV: dict[str, str] = {}
"""Settings every operator of the run gets (--operator-env), e.g. JETSTREAM_OPERATOR_EVENTS."""


class Bench(Servers):
    identity_mode = "admin"
    """identities.MODES: every bench of a run uses the same (--identities)."""
    apply_order = "kinds"
    """APPLY_ORDERS, the same for every bench of a run (--apply-order)."""
    profiling = False
    """Serve kube-apiserver's /debug/pprof (--apiserver-profile)."""
    admission_finalizer = True
    """Install the chart's finalizer policy for each operator, as the chart does where the API
    is served (--admission-finalizer)."""

    def __init__(self, workdir: Path, cluster: bool = False) -> None:
        super().__init__(workdir, self.identity_mode, self.profiling)
        self.cluster = NatsCluster(workdir / "cluster") if cluster else None
        self.operators: list[OperatorProcess] = []
        self.metrics_port = free_port()
        self.shard_labels: list[dict[str, str]] = [{}]
        """Labels of the resources, the i-th resource's taken in turn: one set per operator
        when they split a namespace by label, else none."""

    @property
    def operator(self) -> OperatorProcess:
        return self.operators[0]

    def start(
        self,
        namespaces: list[str] | None = None,
        extra_env: dict[str, str] | None = None,
        timeout: float = 180,
        shards: list[dict[str, str]] | None = None,
    ) -> None:
        """Servers, CRDs, then one operator per entry of `namespaces` (a
        JETSTREAM_OPERATOR_NAMESPACES value each), or per entry of `shards` (labels: the
        operator's selector, and the labels of every len(shards)-th resource); one operator for
        everything when neither is given."""
        self.plane.start()
        self.nats.start()
        if self.cluster is not None:
            self.cluster.start()
        self.connect()
        install_api(self.api)
        if self.admission_finalizer:
            self.install_finalizer_policies(namespaces or [""])
        self.connect_identities(self.identity_mode)
        if shards:
            self.shard_labels = shards
            shares = [
                {"JETSTREAM_OPERATOR_SELECTOR": ",".join(f"{k}={v}" for k, v in labels.items())}
                for labels in shards
            ]
        else:
            shares = [
                {"JETSTREAM_OPERATOR_NAMESPACES": selection} if selection else {}
                for selection in namespaces or [""]
            ]
        for index, share in enumerate(shares):
            env = {**OPERATOR_ENV, **(extra_env or {}), **share}
            if index == 0:
                env["JETSTREAM_OPERATOR_METRICS_PORT"] = str(self.metrics_port)
            operator = OperatorProcess(
                self.identities.controller,
                self.nats.url,
                self.workdir / f"operator-{index}.log",
                extra_env=env,
                verbose=False,  # production logging, as the chart's default
            )
            self.operators.append(operator)
            operator.start(timeout)

    def install_finalizer_policies(self, selections: list[str]) -> None:
        """One policy per operator, as one Helm release per share would make, each for its
        operator's namespaces; then wait until one takes effect (the API server polls new
        CRDs' schemas every 5 s, and refuses their creations until then)."""
        helm = ensure_tools(["helm"])["helm"]
        for index, selection in enumerate(selections):
            entries = [entry for entry in selection.split(",") if entry]
            admission.install(
                self.api, admission.render_finalizer_policy(helm, entries, f"bench-{index}")
            )
        first = [entry for entry in selections[0].split(",") if entry]
        plain = [entry for entry in first if not set(entry) & set("*?![]")]
        probe = plain[0] if plain else "default"
        if probe != "default":
            self.namespace(probe)
        admission.wait_until_effective(self.api, probe)

    def stop(self) -> None:
        for operator in self.operators:
            operator.stop()
        if self.cluster is not None:
            self.cluster.stop()
        self.nats.stop()
        self.plane.stop()

    def namespace(self, name: str) -> str:
        try:
            self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        except client.ApiException as error:
            if error.status != 409:  # made earlier, e.g. to probe the finalizer policy
                raise
        return name

    def create_many(self, namespace: str, plural: str, bodies: list[dict[str, Any]]) -> None:
        """8 at a time."""
        self.create_in_order(namespace, [[(plural, body) for body in bodies]])

    def watch(
        self, namespace: str, plural: str, kind_of: Callable[[dict[str, Any]], str] | None = None
    ) -> ObjectWatch:
        """Ready objects counted from a watch: polling lists of 10,000 objects would load the
        API server more than the operator does."""
        return ObjectWatch(self.objects, namespace, plural, kind_of=kind_of)

    def operator_requests(self) -> dict[str, int]:
        """JetStream requests the operator made, by operation, from its own /metrics."""
        return self.operator_counts("jetstream_operator_nats_request_duration_seconds_count")

    def operator_counts(self, metric: str) -> dict[str, int]:
        """One counter of the operator's /metrics, by its labels' values ("stream DELETED")."""
        samples = scrape(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10)
        return counts_by_labels(samples, metric)

    def drift_counts(self) -> Counter[str]:
        """Advisories the operator received and repairs it made, from its /metrics."""
        advisories = self.operator_counts("jetstream_operator_advisories_total")
        repairs = self.operator_counts("jetstream_operator_drift_repairs_total")
        counts = Counter({f"advisory {key}": n for key, n in advisories.items()})
        counts.update({f"repair {key}": n for key, n in repairs.items()})
        return counts

    def cpu_seconds(self) -> Counter[str]:
        controllers = {
            f"operator-{index}" if index else "operator": each.pid
            for index, each in enumerate(self.operators)
        }
        return servers_cpu_seconds(self.plane, self.nats, controllers)

    def operator_rss_mib(self) -> float:
        return sum(rss_mib(each.pid) for each in self.operators)

    def nats_urls(self) -> list[str]:
        return [self.nats.url, *(self.cluster.urls[:1] if self.cluster else [])]


def keep_logs(bench: Bench, directory: Path | None, label: str) -> None:
    """Copy the operators' logs out of the run's temporary directory (--keep-logs)."""
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    stamp = f"{datetime.now(UTC):%Y%m%d-%H%M}"
    for log in sorted(bench.workdir.glob("operator-*.log")):
        shutil.copyfile(log, directory / f"{label}-{stamp}-{log.name}")
