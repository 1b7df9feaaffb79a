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
