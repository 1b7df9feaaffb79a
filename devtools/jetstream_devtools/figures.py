"""The servers' own figures, for tests and benchmarks that count what the operator did: their
/metrics (kube-apiserver's, the operator's), never the operator's bookkeeping. One parser of
the Prometheus text exposition serves every reader, so they cannot disagree on a line."""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")

_SAMPLE = re.compile(
    r"(?P<series>(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?)\s+(?P<value>\S+)"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One sample line: `series` is the line's text before the value, as served
    (`name{label="value",...}`), for readers that match on it."""

    series: str
    name: str
    labels: dict[str, str]
    """In the order served."""
    value: float


def parse_metrics(text: str) -> Iterator[Sample]:
    """The samples of a text exposition, in order; comments (# HELP, # TYPE) and blank
    lines are not samples."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        found = _SAMPLE.match(line)
        if found is None:
            continue
        labels = {
            key: re.sub(r"\\[\\\"n]", lambda escape: _ESCAPES[escape.group()], value)
            for key, value in _LABEL.findall(found["labels"] or "")
        }
        yield Sample(found["series"], found["name"], labels, float(found["value"]))


def scrape(
    metrics_url: str, context: ssl.SSLContext | None = None, timeout: float = 30
) -> list[Sample]:
    """The samples a /metrics endpoint serves now."""
    with urllib.request.urlopen(metrics_url, context=context, timeout=timeout) as answer:
        return list(parse_metrics(answer.read().decode()))


def apiserver_writes(
    url: str,
    context: ssl.SSLContext | None,
    *,
    group: str | None = None,
    resources: Collection[str] | None = None,
) -> Counter[str]:
    """Writes served so far, as `VERB resource[/subresource]`, from `apiserver_request_total`;
    only of one API group and some resources when given."""
    return count_writes(scrape(f"{url}/metrics", context), group=group, resources=resources)


def count_writes(
    samples: Iterable[Sample],
    *,
    group: str | None = None,
    resources: Collection[str] | None = None,
) -> Counter[str]:
    counts: Counter[str] = Counter()
    for sample in samples:
        labels = sample.labels
        if sample.name != "apiserver_request_total" or labels.get("verb") not in WRITE_VERBS:
            continue
        if group is not None and labels.get("group") != group:
            continue
        if resources is not None and labels.get("resource") not in resources:
            continue
        subresource = labels.get("subresource")
        key = f"{labels['verb']} {labels.get('resource', '')}"
        counts[key + (f"/{subresource}" if subresource else "")] += int(sample.value)
    return counts


def counts_by_labels(samples: Iterable[Sample], metric: str) -> dict[str, int]:
    """One metric's samples by their labels' values in the order served ("stream DELETED")."""
    return {
        " ".join(sample.labels.values()): int(sample.value)
        for sample in samples
        if sample.name == metric
    }


def flow_control_waits(url: str, context: ssl.SSLContext | None) -> dict[str, tuple[float, int]]:
    """Seconds requests waited in API Priority and Fairness queues before they ran, and how many
    ran, by priority level (`apiserver_flowcontrol_request_wait_duration_seconds`); empty when
    flow control is off."""
    return flow_control_totals(scrape(f"{url}/metrics", context))


def parse_flow_control_waits(text: str) -> dict[str, tuple[float, int]]:
    return flow_control_totals(parse_metrics(text))


def flow_control_totals(
    samples: Iterable[Sample],
) -> dict[str, tuple[float, int]]:
    prefix = "apiserver_flowcontrol_request_wait_duration_seconds_"
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for sample in samples:
        for suffix, into in (("sum", sums), ("count", counts)):
            if sample.name != prefix + suffix or sample.labels.get("execute") != "true":
                continue
            level = sample.labels["priority_level"]
            into[level] = into.get(level, 0.0) + sample.value
    return {level: (sums.get(level, 0.0), int(count)) for level, count in counts.items()}
