"""`export --connection` logs in without the `kubernetes` client, which is not a dependency."""

import sys
from pathlib import Path

import pytest
import yaml

from jetstream_operator.export.account import client_login


def test_without_the_client_the_kubeconfig_is_read_as_the_operator_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "current-context": "here",
                "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "secret-token"}}],
            }
        )
    )
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as where it is not installed
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    info = client_login()
    assert (info.server, info.token) == ("https://127.0.0.1:6443", "secret-token")
