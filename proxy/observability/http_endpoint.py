"""kqp's HTTP endpoint on `metrics.listen`: /metrics, /healthz, /readyz and /explain.

A few dozen lines of asyncio streams rather than a web framework: GET only, one request per
connection, bounded header size and read time, so a stuck or hostile scraper costs one socket. The
observer's series are frozen on the loop's thread (`prepare_scrape`) and rendered by
prometheus-client in a worker thread, so a scrape of 10k entities does not stall forwarding.

It is handed what it serves: a registry, a readiness callable and optionally an explainer. It
starts before kqp has reached its upstream: /healthz answers 200 from the start (a liveness probe
must not restart a proxy that waits for Kafka), /readyz 503 with the reason until ready.
`/explain` says who is throttled and why, so it is as exposed as the metrics (loopback by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, generate_latest

log = logging.getLogger("kqp.metrics")

MAX_HEAD_BYTES = 8192
# The classic text format: every Prometheus version reads it, and kqp's names need no UTF-8 escaping.
EXPOSITION_TYPE = "text/plain; version=0.0.4; charset=utf-8"
READ_TIMEOUT = 5.0
GZIP_MIN_BYTES = 1024
Readiness = Callable[[], tuple[bool, str]]
Explain = Callable[[str, str | None], dict[str, Any]]   # (client id, user or None) -> the JSON document
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class MetricsEndpoint:
    def __init__(self, host: str, port: int, registry: CollectorRegistry, readiness: Readiness,
                 before_scrape: Callable[[], None] | None = None, explain: Explain | None = None) -> None:
        self.host, self.port = host, port
        self._registry = registry
        self._readiness = readiness
        self._before_scrape = before_scrape
        self._explain = explain
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
        if path == "/explain" and self._explain is not None:
            query = parse_qs(target.partition("?")[2], keep_blank_values=True)
            if "client_id" not in query:
                return 400, b"explain needs ?client_id=ID (and &user=USER)\n", text, False
            doc = self._explain(query["client_id"][0], query.get("user", [None])[0])
            return 200, json.dumps(doc, indent=1).encode(), "application/json", False
        return 404, b"not found: try /metrics, /healthz, /readyz or /explain\n", text, False

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
