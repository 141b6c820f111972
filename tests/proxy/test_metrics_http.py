"""The HTTP endpoint in-process on 127.0.0.1:0: paths, status codes, readiness reasons, gzip, bad input.

Each test starts its own endpoint on an ephemeral port and closes it; every read has a timeout.
"""

from __future__ import annotations

import asyncio
import gzip

import pytest

from kqp.config.loader import parse_config
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.observability.http_endpoint import MetricsEndpoint
from kqp.proxy.observability.metrics import PrometheusObserver, prepare_scrape
from kqp.proxy.runtime.server import ProxyServer
from kqp.quotas.model import Principal


async def http(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        raw = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


def get(path: str, *extra: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", "Host: x", *extra]) + "\r\n\r\n").encode()


@pytest.fixture
async def endpoint():
    observer = PrometheusObserver(process_metrics=False, clock=asyncio.get_running_loop().time)
    state = {"ready": (False, "starting: waiting for the upstream")}
    ep = MetricsEndpoint("127.0.0.1", 0, observer.registry, lambda: state["ready"],
                         lambda: prepare_scrape(observer))
    await ep.start()
    try:
        yield ep, observer, state
    finally:
        await ep.close()


async def test_metrics_health_and_readiness(endpoint) -> None:
    ep, observer, state = endpoint
    observer.request(Principal("ANONYMOUS", "c1"), 0, 100)
    status, headers, body = await http(ep.port, get("/metrics"))
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    assert int(headers["content-length"]) == len(body)
    assert b'kqp_requests_total{api="Produce",client_id="c1",user="ANONYMOUS"} 1.0' in body
    assert (await http(ep.port, get("/healthz")))[0] == 200
    status, _, body = await http(ep.port, get("/readyz"))
    assert (status, body) == (503, b"starting: waiting for the upstream\n")
    state["ready"] = (True, "ready")
    assert (await http(ep.port, get("/readyz?verbose=1")))[0] == 200


async def test_gzip_when_asked(endpoint) -> None:
    ep, observer, _ = endpoint
    for i in range(50):
        observer.request(Principal("ANONYMOUS", f"c{i}"), 0, 100)
    status, headers, body = await http(ep.port, get("/metrics", "Accept-Encoding: gzip"))
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert b'client_id="c49"' in gzip.decompress(body)


async def test_errors_and_head(endpoint) -> None:
    ep, _, _ = endpoint
    assert (await http(ep.port, get("/nope")))[0] == 404
    assert (await http(ep.port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
    assert (await http(ep.port, b"garbage\r\n\r\n"))[0] == 400
    assert (await http(ep.port, get("/x", "X-Big: " + "a" * 10_000)))[0] == 400
    status, headers, body = await http(ep.port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
    assert (status, headers["content-length"], body) == (200, "3", b"")


async def test_a_silent_client_does_not_block_others(endpoint) -> None:
    ep, _, _ = endpoint
    _, idle = await asyncio.open_connection("127.0.0.1", ep.port)   # connects, never sends
    try:
        assert (await http(ep.port, get("/healthz")))[0] == 200
    finally:
        idle.close()


def assembled_server(ready: bool, last_ok: float | None, stopping: bool = False,
                     error: str | None = None) -> ProxyServer:
    """A real ProxyServer, assembled (no socket opened) with its upstream state set by the test."""
    config = parse_config({"upstream": {"bootstrap_servers": "127.0.0.1:1", "metadata_refresh_ms": 1000}})
    server = ProxyServer(config, observer=ProxyObserver())
    server._assemble(asyncio.get_running_loop())
    server.cluster.last_refresh_ok, server.cluster.last_error = last_ok, error
    if ready:
        server.ready.set()
    if stopping:
        server.stopping.set()
    return server


async def test_readiness_reasons() -> None:
    now = asyncio.get_running_loop().time()   # the cluster stamps its refreshes with the loop's clock
    ok, why = assembled_server(True, now - 1).readiness()
    assert ok and why.startswith("ready")
    ok, why = assembled_server(False, None, error="127.0.0.1:1: ConnectionRefusedError").readiness()
    assert not ok and "waiting for the upstream" in why and "ConnectionRefusedError" in why
    # 3 x metadata_refresh_ms = 3 s: Metadata 4 s old is stale.
    ok, why = assembled_server(True, now - 4, error="timeout").readiness()
    assert not ok and "has not answered Metadata for 4s (limit 3s): timeout" in why
    ok, why = assembled_server(True, now, stopping=True).readiness()
    assert (ok, why) == (False, "shutting down")
