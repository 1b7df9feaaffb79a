"""One Kubernetes API client for the operator's own calls (kopf keeps its own)."""

from __future__ import annotations

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException


def api_client() -> client.ApiClient:
    """In-cluster credentials when running in a pod, the kubeconfig otherwise."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()
