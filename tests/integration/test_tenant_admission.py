"""What a tenant may write, tried as a tenant: a user of the real API server (impersonated, so
its RBAC authorizer decides) who may write our kinds in its own namespace and read one Secret
there. The admission policies refuse, at `kubectl apply`, what would leak a credential or what
NATS refuses anyway; nothing refused reaches NATS (counted from its own API advisories)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from nats.aio.client import Client

from jetstream_operator import GROUP, VERSION

from .figures import ApiAudit
from .helpers import json_body

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]


def _create(api: Any, namespace: str, plural: str, kind: str, spec: dict[str, Any]) -> str:
    """Create as the tenant; the refusal's message, or "" when admitted."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": f"x{abs(hash(str(spec))) % 10**8}"},
        "spec": spec,
    }
    try:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
    except ApiException as error:
        assert error.status in (403, 422), error
        return str(json_body(json.loads(error.body or "{}")).get("message", ""))
    return ""


async def test_a_tenant_cannot_leak_credentials_or_name_what_nats_refuses(
    tenant: Any, namespace: str, nc: Client
) -> None:
    audit = await ApiAudit().start(nc)
    connection = "natsconnections", "NatsConnection"
    tls = ["tls://nats.example:4222"]

    refused = _create(
        tenant,
        namespace,
        *connection,
        {"servers": tls, "token": {"secretName": "theirs", "key": "token"}},
    )
    assert "spec names Secret theirs, and you may not read (get) each" in refused, refused
    assert (
        _create(
            tenant,
            namespace,
            *connection,
            {"servers": tls, "token": {"secretName": "mine", "key": "token"}},
        )
        == ""
    )

    in_url = _create(
        tenant, namespace, *connection, {"servers": ["tls://alice:s3cret@nats.example:4222"]}
    )
    assert "a server URL holds credentials" in in_url and "put them in a Secret" in in_url
    assert "s3cret" not in in_url

    plain = {"servers": ["nats://nats.example:4222"], "userPassword": {"secretName": "mine"}}
    clear = _create(tenant, namespace, *connection, plain)
    assert "credentials would travel unencrypted" in clear and "tls://" in clear, clear
    assert _create(tenant, namespace, *connection, {**plain, "tlsFirst": True}) == ""
    assert _create(tenant, namespace, *connection, {**plain, "allowPlaintext": True}) == ""
    # No credentials, nothing to leak: a plain URL stays as easy as it was.
    assert _create(tenant, namespace, *connection, {"servers": ["nats://nats.example:4222"]}) == ""

    prefix = _create(tenant, namespace, *connection, {"servers": tls, "apiPrefix": "$JS..API"})
    assert "apiPrefix" in prefix, prefix

    for name in ("A/B", "A\\B"):
        message = _create(
            tenant, namespace, "streams", "Stream", {"name": name, "subjects": ["ab.>"]}
        )
        assert "spec.name" in message, message

    await nc.flush()
    await audit.stop()
    assert audit.writes() == 0, audit.subjects
