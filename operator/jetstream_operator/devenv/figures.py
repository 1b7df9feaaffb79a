"""kube-apiserver's own request figures, for tests and benchmarks that count what the operator
wrote: its /metrics, never the operator's bookkeeping."""

from __future__ import annotations

import ssl
import urllib.request
from collections import Counter
from collections.abc import Collection

WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def apiserver_writes(
    url: str,
    context: ssl.SSLContext | None,
    *,
    group: str | None = None,
    resources: Collection[str] | None = None,
) -> Counter[str]:
    """Writes served so far, as `VERB resource[/subresource]`, from `apiserver_request_total`;
    only of one API group and some resources when given."""
    with urllib.request.urlopen(f"{url}/metrics", context=context, timeout=30) as answer:
        text = answer.read().decode()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        pairs = line[line.index("{") + 1 : line.rindex("}")].split(",")
        labels = {key: value.strip('"') for key, value in (part.split("=", 1) for part in pairs)}
        if labels.get("verb") not in WRITE_VERBS:
            continue
        if group is not None and labels.get("group") != group:
            continue
        if resources is not None and labels.get("resource") not in resources:
            continue
        subresource = labels.get("subresource")
        key = f"{labels['verb']} {labels.get('resource', '')}"
        counts[key + (f"/{subresource}" if subresource else "")] += int(
            float(line.rsplit(" ", 1)[1])
        )
    return counts


def flow_control_waits(url: str, context: ssl.SSLContext | None) -> dict[str, tuple[float, int]]:
    """Seconds requests waited in API Priority and Fairness queues before they ran, and how many
    ran, by priority level (`apiserver_flowcontrol_request_wait_duration_seconds`); empty when
    flow control is off."""
    with urllib.request.urlopen(f"{url}/metrics", context=context, timeout=30) as answer:
        return parse_flow_control_waits(answer.read().decode())


def parse_flow_control_waits(text: str) -> dict[str, tuple[float, int]]:
    prefix = "apiserver_flowcontrol_request_wait_duration_seconds_"
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        for suffix, into in (("sum{", sums), ("count{", counts)):
            if not line.startswith(prefix + suffix) or 'execute="true"' not in line:
                continue
            level = line.split('priority_level="', 1)[1].split('"', 1)[0]
            into[level] = into.get(level, 0.0) + float(line.rsplit(" ", 1)[1])
    return {level: (sums.get(level, 0.0), int(count)) for level, count in counts.items()}
