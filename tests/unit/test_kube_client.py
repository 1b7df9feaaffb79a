"""The operator's own Kubernetes requests: in-cluster credentials, and logging in again when
the API server refuses a token (a real HTTP server, not a mock)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import kopf
import pytest
from aiohttp import web

from jetstream_operator.k8s.client import ApiError, KubeApi
from jetstream_operator.k8s.login import service_account
from jetstream_operator.k8s.throttle import RequestLimit

IN_POD = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def mounted(directory: Path, token: str = "secret-token\n") -> Path:
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_text("not read here")
    (directory / "namespace").write_text("operators\n")
    return directory


def test_a_pod_reaches_the_api_server_by_the_service_address(tmp_path: Path) -> None:
    info = service_account(mounted(tmp_path), IN_POD)
    assert info is not None
    assert info.server == "https://10.0.0.1:443"
    assert info.token == "secret-token"
    assert info.ca_path == str(tmp_path / "ca.crt")
    assert info.default_namespace == "operators"
    ipv6 = service_account(tmp_path, {**IN_POD, "KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert ipv6 is not None and ipv6.server == "https://[fd00::1]:443"


def test_outside_a_pod_there_is_no_service_account(tmp_path: Path) -> None:
    assert service_account(tmp_path, IN_POD) is None  # no token mounted
    assert service_account(mounted(tmp_path), {}) is None  # not in a pod's environment
    with pytest.raises(kopf.LoginError):
        service_account(mounted(tmp_path, token=""), IN_POD)


@pytest.fixture
async def api_server() -> AsyncIterator[tuple[str, list[str]]]:
    """Accepts only the token "new"; records the Authorization header of every request."""
    seen: list[str] = []

    async def secret(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer new":
            return web.json_response({"kind": "Status", "message": "Unauthorized"}, status=401)
        if request.match_info["name"] == "missing":
            return web.json_response(
                {"kind": "Status", "message": 'secrets "missing" not found'}, status=404
            )
        return web.json_response({"metadata": {"name": request.match_info["name"]}})

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.3)
        return web.json_response({"kind": "Status", "status": "Success"})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{namespace}/secrets/{name}", secret)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_a_refused_token_is_replaced_by_logging_in_again(
    api_server: tuple[str, list[str]],
) -> None:
    server, seen = api_server
    tokens = iter(["old", "new"])
    async with KubeApi(lambda: kopf.ConnectionInfo(server=server, token=next(tokens))) as api:
        answer = await api.request("GET", "/api/v1/namespaces/default/secrets/one")
        assert answer == {"metadata": {"name": "one"}}
        assert seen == ["Bearer old", "Bearer new"]
        with pytest.raises(ApiError) as refused:
            await api.request("GET", "/api/v1/namespaces/default/secrets/missing")
    assert refused.value.status == 404
    assert 'secrets "missing" not found' in str(refused.value)


async def test_a_token_refused_again_is_an_error_not_a_loop(
    api_server: tuple[str, list[str]],
) -> None:
    server, seen = api_server
    async with KubeApi(lambda: kopf.ConnectionInfo(server=server, token="old")) as api:
        with pytest.raises(ApiError) as refused:
            await api.request("GET", "/api/v1/namespaces/default/secrets/one")
    assert refused.value.status == 401
    assert seen == ["Bearer old", "Bearer old"]


async def test_requests_queued_behind_busy_connections_wait_their_turn(
    api_server: tuple[str, list[str]],
) -> None:
    """A burst of writes queues for the few connections; the wait is not a connect timeout."""
    server, _ = api_server
    login = lambda: kopf.ConnectionInfo(server=server, token="new")  # noqa: E731
    async with KubeApi(login, connections=1, connect_timeout=0.1, read_timeout=5) as api:
        answers = await asyncio.gather(*(api.request("GET", "/slow") for _ in range(3)))
    assert [answer["status"] for answer in answers] == ["Success"] * 3


async def test_a_request_without_an_answer_times_out(api_server: tuple[str, list[str]]) -> None:
    server, _ = api_server
    login = lambda: kopf.ConnectionInfo(server=server, token="new")  # noqa: E731
    async with KubeApi(login, read_timeout=0.1) as api:
        with pytest.raises(TimeoutError):
            await api.request("GET", "/slow")


async def test_the_operators_own_requests_share_the_request_limit(
    api_server: tuple[str, list[str]],
) -> None:
    """Its Events and status patches wait for a place like kopf's requests do."""
    server, _ = api_server
    login = lambda: kopf.ConnectionInfo(server=server, token="new")  # noqa: E731
    limit = RequestLimit(1)
    async with KubeApi(login, middlewares=(limit,)) as api:
        started = asyncio.get_running_loop().time()
        await asyncio.gather(api.request("GET", "/slow"), api.request("GET", "/slow"))
        assert asyncio.get_running_loop().time() - started >= 0.6  # one after the other
