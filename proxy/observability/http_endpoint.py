"""kqp's HTTP endpoint on `metrics.listen`: /metrics, /healthz and /readyz.

A few dozen lines of asyncio streams rather than a web framework: three GET paths, one request per
connection (`Connection: close`), bounded header size and read time, so a stuck or hostile scraper
costs one socket and nothing else. The exposition text comes from prometheus-client's
`generate_latest`: the observer's series are frozen on the loop's thread (`prepare_scrape`), then
rendered in a worker thread, so a scrape of 10k entities does not stall forwarding for the length
of a render.

The endpoint starts before kqp has reached its upstream: /healthz answers 200 from the start (the
process is alive; a liveness probe must not restart a proxy that waits for Kafka), and /readyz
answers 503 with the reason until the listeners are bound and the upstream has answered Metadata
within 3 x `upstream.metadata_refresh_ms`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest

from .metrics import PrometheusObserver, prepare_scrape

if TYPE_CHECKING:
    from kqp.proxy.runtime.server import ProxyServer

log = logging.getLogger("kqp.metrics")

MAX_HEAD_BYTES = 8192
# The classic text format: every Prometheus version reads it, and kqp's names need no UTF-8 escaping.
EXPOSITION_TYPE = "text/plain; version=0.0.4; charset=utf-8"
READ_TIMEOUT = 5.0
GZIP_MIN_BYTES = 1024
Readiness = Callable[[], tuple[bool, str]]
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class MetricsEndpoint:
    def __init__(self, host: str, port: int, registry: CollectorRegistry, readiness: Readiness,
                 before_scrape: Callable[[], None] | None = None) -> None:
        self.host, self.port = host, port
        self._registry = registry
        self._readiness = readiness
        self._before_scrape = before_scrape
        self._server: asyncio.base_events.Server | None = None
        self._scrape_lock = asyncio.Lock()   # one render at a time: the frozen state is per scrape

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_HEAD_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.host, self.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
            except asyncio.LimitOverrunError:
                await self._reply(writer, 400, b"request head too large\n")
                return
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return
            status, body, ctype, gzipped = await self._route(head)
            await self._reply(writer, status, body, ctype, gzipped, head_only=head.startswith(b"HEAD "))
        except ConnectionError:
            pass
        except Exception:
            log.exception("metrics endpoint: unexpected error answering a request")
        finally:
            writer.close()

    async def _route(self, head: bytes) -> tuple[int, bytes, str, bool]:
        text = "text/plain; charset=utf-8"
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            return 400, b"bad request line\n", text, False
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return 405, b"only GET and HEAD\n", text, False
        path = target.split("?", 1)[0]
        if path == "/metrics":
            async with self._scrape_lock:
                if self._before_scrape is not None:
                    self._before_scrape()
                body = await asyncio.to_thread(generate_latest, self._registry)
            accepts_gzip = any(h.lower().startswith("accept-encoding:") and "gzip" in h.lower() for h in lines[1:])
            if accepts_gzip and len(body) >= GZIP_MIN_BYTES:
                return 200, gzip.compress(body, compresslevel=1), EXPOSITION_TYPE, True
            return 200, body, EXPOSITION_TYPE, False
        if path == "/healthz":
            return 200, b"ok\n", text, False
        if path == "/readyz":
            ready, reason = self._readiness()
            return (200 if ready else 503), f"{reason}\n".encode(), text, False
        return 404, b"not found: try /metrics, /healthz or /readyz\n", text, False

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "text/plain",
                     gzipped: bool = False, head_only: bool = False) -> None:
        headers = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", f"Content-Type: {ctype}",
                   f"Content-Length: {len(body)}", "Connection: close"]
        if gzipped:
            headers.append("Content-Encoding: gzip")
        writer.write(("\r\n".join(headers) + "\r\n\r\n").encode("latin-1"))
        if not head_only:
            writer.write(body)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT)


def proxy_readiness(server: ProxyServer) -> Readiness:
    """/readyz for a ProxyServer: listeners bound, upstream Metadata fresh, not shutting down."""

    def check() -> tuple[bool, str]:
        if server.stopping.is_set():
            return False, "shutting down"
        ctx = server.ctx
        if ctx is None or not server.ready.is_set():
            detail = ctx.cluster.last_error if ctx is not None else None
            return False, f"starting: waiting for the upstream{f' ({detail})' if detail else ''}"
        limit = 3 * server.config.upstream.metadata_refresh_ms / 1000
        last = ctx.cluster.last_refresh_ok
        age = None if last is None else time.monotonic() - last   # the cluster stamps with time.monotonic
        if age is None or age > limit:
            since = "ever" if age is None else f"{age:.0f}s"
            error = f": {ctx.cluster.last_error}" if ctx.cluster.last_error else ""
            return False, f"upstream has not answered Metadata for {since} (limit {limit:g}s){error}"
        return True, f"ready (upstream Metadata {age:.0f}s old)"

    return check


class MetricsService:
    """The endpoint plus the observer's expiry task, started and stopped together by the server."""

    def __init__(self, endpoint: MetricsEndpoint, task: asyncio.Task[None] | None, stop: asyncio.Event) -> None:
        self.endpoint = endpoint
        self._task = task
        self._stop = stop

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.endpoint.close()


async def start_metrics(server: ProxyServer) -> MetricsService | None:
    """Bind `metrics.listen` (None when unset) and start entity expiry; logs the endpoint's address."""
    listen = server.config.metrics.listen
    if listen is None or server.ctx is None:
        return None
    readiness = proxy_readiness(server)
    observer = server.observer
    stop = asyncio.Event()
    task: asyncio.Task[None] | None = None
    if isinstance(observer, PrometheusObserver):
        observer.bind(server.ctx, readiness)
        registry = observer.registry
        task = asyncio.get_running_loop().create_task(observer.maintain(stop))
    else:
        registry = CollectorRegistry()   # an observer of its own: health endpoints only
    endpoint = MetricsEndpoint(listen.host, listen.port, registry, readiness, lambda: prepare_scrape(observer))
    try:
        await endpoint.start()
    except OSError:
        if task is not None:
            task.cancel()
        raise
    log.info("metrics endpoint %s/metrics (health: /healthz, /readyz)", endpoint.url)
    return MetricsService(endpoint, task, stop)
