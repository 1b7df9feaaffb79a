"""kube-apiserver's CPU profile while the operator converges, and where that CPU went.

Convergence is bound by the API server's CPU on a small machine, so the question after "how many
writes" is "what does the server spend on each". `--apiserver-profile DIR` (operator_bench.py)
serves /debug/pprof on the run's kube-apiserver, records its CPU profile for the first
`--apiserver-profile-seconds` of each size's convergence, keeps the raw profile in DIR and reports
the share of a few parts of the server. `go tool pprof -top -cum kube-apiserver.pprof` shows
the rest.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path

from jetstream_devtools.controlplane import ControlPlane

PARTS = {
    "CEL rules": "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel.(*Validator).Validate",
    "garbage collection (background)": "runtime.gcBgMarkWorker",
    "decoding (requests, stored objects)": (
        "k8s.io/apimachinery/pkg/runtime/serializer/versioning.(*codec).Decode"
    ),
    "JSON encoding (responses, watch events)": "encoding/json.(*encodeState).marshal",
    "watch events read from etcd": (
        "k8s.io/apiserver/pkg/storage/etcd3.(*watchChan).serialProcessEvents"
    ),
    "managedFields": (
        "k8s.io/apimachinery/pkg/util/managedfields/internal.(*managedFieldsUpdater).Update"
    ),
}
"""Label -> the function whose cumulative share is reported. They overlap a little (decoding
happens inside an update), so the shares do not add up to a whole."""


class ProfileRecording(threading.Thread):
    """Records `seconds` of the API server's CPU profile into `path`, in the background."""

    def __init__(self, plane: ControlPlane, seconds: float, path: Path) -> None:
        super().__init__(daemon=True)
        self.plane, self.seconds, self.path = plane, seconds, path
        self.error: Exception | None = None

    def run(self) -> None:
        url = f"{self.plane.url}/debug/pprof/profile?seconds={int(self.seconds)}"
        try:
            with urllib.request.urlopen(
                url, context=self.plane.ssl_context(), timeout=self.seconds + 60
            ) as response:
                self.path.write_bytes(response.read())
        except Exception as error:  # reported, not raised: the run's other figures stand
            self.error = error


def shares(profile: Path) -> dict[str, float]:
    """Label -> percent of the profile's CPU; empty without a `go` to read it."""
    go = shutil.which("go")
    if go is None or not profile.exists():
        return {}
    listing = subprocess.run(
        [go, "tool", "pprof", "-top", "-cum", "-nodecount=5000", str(profile)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    cumulative: dict[str, float] = {}
    for line in listing.splitlines():
        columns = line.split(None, 5)
        if len(columns) == 6 and columns[4].endswith("%"):
            cumulative[columns[5]] = float(columns[4].rstrip("%"))
    return {label: cumulative[name] for label, name in PARTS.items() if name in cumulative}


def line(profile: Path, seconds: float, found: dict[str, float]) -> str:
    parts = ", ".join(f"{label} {share:.1f}%" for label, share in found.items())
    return f"- kube-apiserver CPU profile, first {seconds:.0f} s of convergence ({profile}): " + (
        parts or "no `go` to read it"
    )
