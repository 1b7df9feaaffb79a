"""The operator's Kubernetes credentials and kopf's session, without the `kubernetes` client
library.

kopf logs in through the `kubernetes` client when it is installed, which costs ~35 MiB of
memory for a few plain requests; the operator registers this login instead, and its own
requests (k8s/client.py) use the same credentials. How many requests go out at once is
k8s/throttle.py's business.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import aiohttp
import kopf
from aiohttp.client_middlewares import ClientMiddlewareType

from .throttle import RequestLimit

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def service_account(
    directory: Path = SERVICE_ACCOUNT,
    environ: Mapping[str, str] = os.environ,
    trust_env: bool = False,
) -> kopf.ConnectionInfo | None:
    """A pod's mounted token, read as the `kubernetes` client reads it: the API server is
    KUBERNETES_SERVICE_HOST/PORT (kopf's own login assumes DNS for kubernetes.default.svc,
    which not every cluster has). None outside a pod."""
    host = environ.get("KUBERNETES_SERVICE_HOST")
    port = environ.get("KUBERNETES_SERVICE_PORT")
    token_file = directory / "token"
    if not host or not port or not token_file.exists():
        return None
    token = token_file.read_text().strip()
    if not token:
        raise kopf.LoginError(f"the service account token {token_file} is empty")
    ca_file = directory / "ca.crt"
    namespace_file = directory / "namespace"
    return kopf.ConnectionInfo(
        server=f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}",
        ca_path=str(ca_file) if ca_file.exists() else None,
        token=token,
        default_namespace=namespace_file.read_text().strip() if namespace_file.exists() else None,
        trust_env=trust_env,
    )


def credentials(settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
    """In-cluster credentials in a pod, the kubeconfig ($KUBECONFIG or ~/.kube/config)
    otherwise: the order the `kubernetes` client used."""
    info = service_account(trust_env=settings.networking.trust_env) or (
        kopf.login_with_kubeconfig(settings=settings)
    )
    if info is None:
        raise kopf.LoginError("neither a service account token nor a kubeconfig was found")
    return info


def limited_session(
    info: kopf.ConnectionInfo, limit: RequestLimit, *others: ClientMiddlewareType
) -> kopf.AiohttpSession:
    """kopf's session as kopf would make it from `info`, with a RequestLimit after `others`."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
        middlewares=(*others, limit),
    )
    return kopf.AiohttpSession(
        aiohttp_session=session,
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
    )
