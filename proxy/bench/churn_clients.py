"""Short-lived connections, one after another: what a proxy pays to set a connection up and tear it down.

A Spark job opens connections per executor and per task retry, and its consumers carry a fresh client id
per query, so much of what a proxy does for it is a connection's whole life: accept, the upstream
connection, ApiVersions, the first request's principal and sensors, close. Each connection here does
what a producer's broker connection does: ApiVersions v3 (naming its software, as clients since Kafka
2.4 do), one Produce (acks=1, one record batch) whose answer is checked, then close. `parallel` of them
run at once for `seconds`; every connection gets a client id of its own (`distinct`) or all share one.
Frames are built once and patched per connection (client id digits, correlation id), so the client
process stays cheap beside the proxy it measures.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest

from .busy_clients import call, produce_frame, produced_offset
from .idle_clients import run_many_clients
from .workloads import percentile

_DIGITS = 8   # a distinct client id is `<prefix>-NNNNNNNN`: the same length for every connection


def _client_id(prefix: str, index: int, distinct: bool) -> str:
    return f"{prefix}-{index % 10 ** _DIGITS:0{_DIGITS}d}" if distinct else prefix


def _api_versions_frame(client_id: str) -> bytearray:
    request = ApiVersionsRequest(client_software_name="kqp-bench-churn", client_software_version="1.0")
    request.with_header(correlation_id=0, client_id=client_id)
    return bytearray(request.encode(version=3, header=True, framed=True))


def _patched(frame: bytearray, template: bytes, client_id: str) -> bytearray:
    """`frame` with its header's client id (built as `template`) replaced by `client_id`, as long."""
    out = bytearray(frame)
    at = out.index(template)
    out[at:at + len(template)] = client_id.encode()
    return out


async def _one(host: str, port: int, frames: tuple[bytearray, bytearray], reply_timeout: float) -> float:
    """One connection's life; its seconds from connect to the Produce's answer."""
    started = time.perf_counter()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), reply_timeout)
    try:
        await call(reader, writer, frames[0], 1, reply_timeout)
        produced_offset(await call(reader, writer, frames[1], 2, reply_timeout))
        took = time.perf_counter() - started
    finally:
        writer.close()
    await writer.wait_closed()
    return took


async def _run(host: str, port: int, topic: str, seconds: float, parallel: int, distinct: bool, prefix: str,
               record_bytes: int, reply_timeout: float) -> dict[str, Any]:
    template = _client_id(prefix, 0, distinct)
    api_versions = _api_versions_frame(template)
    produce = produce_frame(topic, 0, template, 1, record_bytes)
    lives: list[float] = []
    errors: list[str] = []
    count = [0]
    started = time.perf_counter()
    deadline = started + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            index = count[0]
            count[0] += 1
            client_id = _client_id(prefix, index, distinct)
            frames = (api_versions, produce) if not distinct else (
                _patched(api_versions, template.encode(), client_id), _patched(produce, template.encode(), client_id))
            try:
                lives.append(await _one(host, port, frames, reply_timeout))
            except (OSError, asyncio.IncompleteReadError, TimeoutError, RuntimeError, ValueError) as exc:
                errors.append(f"connection {index}: {type(exc).__name__}: {exc}")
                if len(errors) >= 20:   # the path is down: do not spend the rest finding out
                    return

    await asyncio.gather(*(worker() for _ in range(parallel)))
    elapsed = time.perf_counter() - started
    lives.sort()
    return {"connections": len(lives), "errors": len(errors), "error_samples": errors[:5], "seconds": elapsed,
            "connections_s": len(lives) / elapsed, "bytes_moved": len(lives) * len(produce),
            "life_p50_ms": percentile(lives, 50) * 1000 if lives else None,
            "life_p99_ms": percentile(lives, 99) * 1000 if lives else None}


def churn(host: str, port: int, topic: str, seconds: float = 8.0, parallel: int = 4, distinct: bool = True,
          prefix: str = "kqp-bench-churn", record_bytes: int = 1000, timeout: float = 10.0) -> dict[str, Any]:
    """Connections opened and closed for `seconds`, `parallel` at a time, each ApiVersions then one
    Produce of a `record_bytes` record to partition 0 of `topic`; client ids distinct or one."""
    return run_many_clients(_run(host, port, topic, seconds, parallel, distinct, prefix, record_bytes, timeout))
