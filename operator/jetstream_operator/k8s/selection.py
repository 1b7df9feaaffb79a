"""Which of the operator's resources this process serves, by label: a shard of a namespace.

kopf watches a kind per namespace (or cluster-wide) and has no setting for a label selector, so
the operator adds one to kopf's list and watch requests of the selected kinds, as a middleware
of kopf's session: kube-apiserver then sends this process only the resources it serves. It
keeps no state for the others, and a resource whose labels stop matching arrives as a deletion
of the watch (kopf forgets it, nothing runs in NATS), then as a new resource of the deployment
it now matches.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

import aiohttp
from aiohttp.client_middlewares import ClientHandlerType

from .. import GROUP

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY = rf"(?:{_PREFIX}/)?{_NAME}"
_VALUE = rf"(?:{_NAME})?"
_REQUIREMENT = re.compile(
    rf"""
    (?P<absent>!\s*{_KEY})
    | (?P<key>{_KEY})\s*(?:
        (?P<compare>==|!=|=)\s*(?P<value>{_VALUE})
        | \s(?P<set>in|notin)\s*\(\s*(?P<values>{_NAME}(?:\s*,\s*{_NAME})*)\s*\)
      )?
    """,
    re.VERBOSE,
)


def _requirements(text: str) -> list[str]:
    """The selector's requirements: split at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def label_selector_problem(text: str) -> str | None:
    """What is wrong with a label selector in kubectl's syntax (`tier=gold`, `shard in (0,1)`,
    `env!=test`, `canary`, `!legacy`), None when kube-apiserver would take it. Checked at start,
    where a bad one would otherwise make every watch of the operator fail."""
    if not text.strip():
        return "the label selector is empty; leave the setting unset to serve every resource"
    for requirement in _requirements(text):
        if not requirement:
            return f"label selector {text!r} has an empty requirement (two commas in a row?)"
        if _REQUIREMENT.fullmatch(requirement) is None:
            return (
                f"label selector {text!r}: {requirement!r} is not a requirement; use key=value, "
                "key!=value, key in (a,b), key notin (a,b), key or !key, with label keys and "
                "values of at most 63 letters, digits, '-', '_' and '.'"
            )
    return None


def label_selector_matches(text: str, labels: Mapping[str, str]) -> bool:
    """Whether labels satisfy a selector that `label_selector_problem` accepted, as
    kube-apiserver decides it: every requirement holds; `!=` and `notin` hold for an absent
    key."""
    for requirement in _requirements(text):
        found = _REQUIREMENT.fullmatch(requirement)
        if found is None:
            raise ValueError(f"not a label selector requirement: {requirement!r}")
        if found["absent"]:
            if found["absent"].lstrip("!").strip() in labels:
                return False
            continue
        value = labels.get(found["key"])
        if found["compare"] in ("=", "=="):
            holds = value == found["value"]
        elif found["compare"] == "!=":
            holds = value != found["value"]
        elif found["set"]:
            values = {item.strip() for item in found["values"].split(",")}
            holds = (value in values) if found["set"] == "in" else (value not in values)
        else:
            holds = value is not None
        if not holds:
            return False
    return True


def group_collection(request: aiohttp.ClientRequest) -> str | None:
    """The plural when the request is for a collection of our group, cluster-wide
    (`/apis/{GROUP}/{version}/{plural}`) or in a namespace (`.../namespaces/{ns}/{plural}`):
    what lists and watches ask for. None for any other path."""
    parts = request.url.path.strip("/").split("/")
    if len(parts) not in (4, 6) or parts[0] != "apis" or parts[1] != GROUP:
        return None
    if len(parts) == 6 and parts[3] != "namespaces":
        return None
    return parts[-1]


def selected_collection(request: aiohttp.ClientRequest, plurals: Collection[str]) -> bool:
    """Whether the request lists or watches one of `plurals` of our group."""
    return request.method == "GET" and group_collection(request) in plurals


class LabelSelection:
    """An aiohttp middleware adding `selector` to the lists and watches of `plurals`."""

    def __init__(self, selector: str, plurals: Collection[str]) -> None:
        self.selector = selector
        self.plurals = frozenset(plurals)

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if selected_collection(request, self.plurals):
            request.url = request.url.update_query(labelSelector=self.selector)
        return await handler(request)
