"""Many concurrent, mostly idle Kafka client connections, each doing what an idle client does.

A Spark job or a fleet of services keeps hundreds of connections open that mostly wait; what a
proxy must prove there is memory per connection and that nobody gets dropped. Each connection here
sends ApiVersions once, then a small Metadata request every `interval` seconds (a stand-in for
heartbeats and metadata refreshes), and checks every response's correlation id. Raw asyncio
streams keep 1000 clients cheap enough to drive from one process; the requests are encoded with
kafka-python's message classes, so no schema is written by hand here.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Coroutine
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from .processes import raise_fd_limit

_CONNECT_BATCH = 50  # connect in waves: a 1000-SYN burst would overflow a default listen backlog


def _frame(request: Any, correlation_id: int, client_id: str) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytes,
                    correlation_id: int, reply_timeout: float) -> None:
    writer.write(frame)
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), reply_timeout))[0]
    body = await asyncio.wait_for(reader.readexactly(size), reply_timeout)
    (got,) = struct.unpack_from(">i", body)
    if got != correlation_id:
        raise RuntimeError(f"correlation id {got}, expected {correlation_id}")


class _Tally:
    def __init__(self) -> None:
        self.connected = 0
        self.requests = 0
        self.errors: list[str] = []


async def _client(index: int, host: str, port: int, until: float, interval: float, reply_timeout: float,
                  tally: _Tally, connected: asyncio.Semaphore) -> None:
    client_id = f"kqp-bench-idle-{index}"
    writer = None
    try:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), reply_timeout)
        finally:
            connected.release()
        tally.connected += 1
        correlation_id = 1
        await _exchange(reader, writer, _frame(ApiVersionsRequest[0](), correlation_id, client_id),
                        correlation_id, reply_timeout)
        tally.requests += 1
        loop = asyncio.get_running_loop()
        # Spread the periodic requests over the interval so they do not arrive as one burst.
        next_at = loop.time() + interval * (index % 97) / 97
        while True:
            now = loop.time()
            if next_at >= until:
                break
            await asyncio.sleep(max(0.0, next_at - now))
            correlation_id += 1
            await _exchange(reader, writer, _frame(MetadataRequest[1](topics=[]), correlation_id,
                                                   client_id), correlation_id, reply_timeout)
            tally.requests += 1
            next_at += interval
        await asyncio.sleep(max(0.0, until - loop.time()))
    except (OSError, asyncio.IncompleteReadError, TimeoutError, RuntimeError) as exc:
        tally.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        if writer is not None:
            writer.close()


async def _run(host: str, port: int, count: int, hold_seconds: float, interval: float,
               reply_timeout: float) -> dict[str, Any]:
    tally = _Tally()
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(_CONNECT_BATCH)
    started = time.perf_counter()
    # One common end time, with the connection ramp on top of the hold, so all `count` connections
    # are open at once for the whole hold; the harness samples the proxy's memory meanwhile.
    until = loop.time() + hold_seconds + count / 1000.0
    running = []
    for index in range(count):
        await gate.acquire()
        running.append(asyncio.create_task(
            _client(index, host, port, until, interval, reply_timeout, tally, gate)))
    connected_after = time.perf_counter() - started
    await asyncio.gather(*running)
    return {"connections": count, "connected": tally.connected, "requests": tally.requests,
            "errors": len(tally.errors), "error_samples": tally.errors[:5],
            "ramp_seconds": connected_after, "seconds": time.perf_counter() - started}


def idle_connections(host: str, port: int, count: int = 1000, hold_seconds: float = 3.0,
                     interval: float = 1.0, timeout: float = 10.0) -> dict[str, Any]:
    """Hold `count` connections open for `hold_seconds` once connected; count errors."""
    return run_many_clients(_run(host, port, count, hold_seconds, interval, reply_timeout=timeout))


def run_many_clients(main: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """Run a many-connections workload on uvloop (where installed), the open-file limit raised."""
    raise_fd_limit()
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


async def _entities(host: str, port: int, entities: int, connections: int,
                    reply_timeout: float) -> dict[str, Any]:
    per_connection = -(-entities // connections)
    errors: list[str] = []

    async def one(first: int) -> int:
        done = 0
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), reply_timeout)
        try:
            for offset in range(per_connection):
                index = first + offset
                if index >= entities:
                    break
                # Kafka attributes every request to its header's client id, so one connection
                # can speak for many quota entities.
                await _exchange(reader, writer, _frame(MetadataRequest[1](topics=[]), index + 1,
                                                       f"kqp-bench-entity-{index}"), index + 1, reply_timeout)
                done += 1
        finally:
            writer.close()
        return done

    started = time.perf_counter()
    results = await asyncio.gather(*(one(n * per_connection) for n in range(connections)),
                                   return_exceptions=True)
    requests = 0
    for result in results:
        if isinstance(result, BaseException):
            errors.append(f"{type(result).__name__}: {result}")
        else:
            requests += result
    return {"entities": entities, "requests": requests, "errors": len(errors),
            "error_samples": errors[:5], "seconds": time.perf_counter() - started}


def distinct_entities(host: str, port: int, entities: int = 10_000, connections: int = 100,
                      timeout: float = 10.0) -> dict[str, Any]:
    """One Metadata request from each of `entities` distinct client ids, over a few connections.

    With quotas configured for `<default>` client ids, each id becomes a quota entity with its own
    sensors; the harness reads the proxy's RSS before and after to report memory per entity.
    """
    with asyncio.Runner() as runner:
        return runner.run(_entities(host, port, entities, connections, reply_timeout=timeout))
