"""Many connections producing and fetching at once, every answer checked: the load a shared kqp
must carry without a single error.

Each connection, paced at one cycle per `interval` seconds (spread so they do not arrive as one
burst), sends a Produce (acks=1, one record batch of `records` x `record_bytes`) to its partition,
then a Fetch from the offset that Produce was given, and checks: the correlation ids, the Produce's
error code, the Fetch's error codes and that it returned records wherever the broker's high
watermark says they are readable. Any mismatch, error code, timeout
or dropped connection is an error, and the connection stops there (an error never hides behind a
retry). Frames are built once per connection with kafka-python's message classes; a cycle only
patches the correlation id and the fetch offset, so one client process can drive 1000 connections.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from .idle_clients import run_many_clients

_CONNECT_BATCH = 50       # connect in waves, as idle_clients does
_PRODUCE_V, _FETCH_V = 7, 4
_I32, _I64 = struct.Struct(">i"), struct.Struct(">q")
_CORRELATION_AT = 8       # size (4), api key (2), api version (2), then the correlation id


@dataclass(frozen=True)
class _Load:
    host: str
    port: int
    topic: str
    partitions: int
    until: float          # loop time the last cycle starts before
    interval: float
    records: int
    record_bytes: int
    reply_timeout: float


@dataclass
class _Tally:
    connected: int = 0
    produced: int = 0
    fetched: int = 0
    not_yet_visible: int = 0    # Fetches the broker answered before the batch reached its high watermark
    bytes_moved: int = 0
    errors: list[str] = field(default_factory=list)


def produce_frame(topic: str, partition: int, client_id: str, records: int, record_bytes: int) -> bytearray:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(records):
        builder.append(timestamp=None, key=None, value=bytes([65 + i % 26]) * record_bytes, headers=[])
    builder.close()
    data = ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=bytes(builder.buffer()))
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=10_000,
                             topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[data])])
    request.with_header(correlation_id=0, client_id=client_id)
    return bytearray(request.encode(version=_PRODUCE_V, header=True, framed=True))


def _fetch_frame(topic: str, partition: int, client_id: str, max_bytes: int) -> tuple[bytearray, int]:
    """The frame, and where its fetch offset sits (found by encoding a marker offset)."""
    marker = 0x0123456789ABCDEF
    part = FetchRequest.FetchTopic.FetchPartition(partition=partition, fetch_offset=marker,
                                                  partition_max_bytes=max_bytes)
    request = FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                           topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])])
    request.with_header(correlation_id=0, client_id=client_id)
    frame = bytearray(request.encode(version=_FETCH_V, header=True, framed=True))
    return frame, bytes(frame).index(_I64.pack(marker))


async def call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytearray,
                correlation_id: int, reply_timeout: float) -> bytes:
    _I32.pack_into(frame, _CORRELATION_AT, correlation_id)
    writer.write(frame)
    size = _I32.unpack(await asyncio.wait_for(reader.readexactly(4), reply_timeout))[0]
    body = await asyncio.wait_for(reader.readexactly(size), reply_timeout)
    if (got := _I32.unpack_from(body)[0]) != correlation_id:
        raise RuntimeError(f"correlation id {got}, expected {correlation_id}")
    return body[4:]


def produced_offset(body: bytes) -> int:
    (partition,) = ProduceResponse.decode(body, version=_PRODUCE_V).responses[0].partition_responses
    if partition.error_code:
        raise RuntimeError(f"Produce answered error code {partition.error_code}")
    return int(partition.base_offset)


def _fetched(body: bytes, offset: int, last_try: bool = True) -> bool:
    """Whether the Fetch returned records. None is an error only where the broker's own high
    watermark says the batch produced at `offset` is readable, on the `last_try`; below it the broker
    has not made the batch visible yet (Tansu, now and then, right after an acks=1 Produce, and on a
    starved machine even past the high watermark it answered with), which kqp cannot change."""
    response = FetchResponse.decode(body, version=_FETCH_V)
    got = False
    for topic in response.responses:
        for partition in topic.partitions:
            if partition.error_code:
                raise RuntimeError(f"Fetch answered error code {partition.error_code}")
            if partition.records:
                got = True
            elif partition.high_watermark > offset and last_try:
                raise RuntimeError(f"Fetch returned no records below the high watermark {partition.high_watermark}")
    return got


async def _client(index: int, load: _Load, tally: _Tally, gate: asyncio.Semaphore) -> None:
    client_id = f"kqp-bench-busy-{index}"
    partition = index % load.partitions
    reply_timeout = load.reply_timeout
    writer = None
    try:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(load.host, load.port), reply_timeout)
        finally:
            gate.release()
        tally.connected += 1
        produce = produce_frame(load.topic, partition, client_id, load.records, load.record_bytes)
        fetch, offset_at = _fetch_frame(load.topic, partition, client_id, 4 * len(produce))
        loop = asyncio.get_running_loop()
        next_at = loop.time() + load.interval * (index % 97) / 97
        correlation_id = 0
        while next_at < load.until:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            correlation_id += 1
            offset = produced_offset(await call(reader, writer, produce, correlation_id, reply_timeout))
            tally.produced += 1
            _I64.pack_into(fetch, offset_at, offset)
            correlation_id += 1
            body = await call(reader, writer, fetch, correlation_id, reply_timeout)
            tally.fetched += 1
            if not _fetched(body, offset, last_try=False):   # once more, a moment later, before it is an error
                tally.not_yet_visible += 1
                await asyncio.sleep(0.2)
                correlation_id += 1
                _fetched(await call(reader, writer, fetch, correlation_id, reply_timeout), offset)
            tally.bytes_moved += len(produce) + len(body)
            # A client that fell behind (a loaded machine) goes on at once, never in a catch-up burst,
            # and stops at `until` like the others: the rate achieved is what is reported.
            next_at = max(next_at + load.interval, loop.time())
    except (OSError, asyncio.IncompleteReadError, TimeoutError, RuntimeError, ValueError) as exc:
        tally.errors.append(f"connection {index}: {type(exc).__name__}: {exc}")
    finally:
        if writer is not None:
            writer.close()


async def _run(host: str, port: int, topic: str, partitions: int, count: int, seconds: float, interval: float,
               records: int, record_bytes: int, reply_timeout: float) -> dict[str, Any]:
    tally = _Tally()
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(_CONNECT_BATCH)
    started = time.perf_counter()
    until = loop.time() + seconds + count / 1000.0   # the ramp on top: all `count` busy for `seconds`
    load = _Load(host, port, topic, partitions, until, interval, records, record_bytes, reply_timeout)
    running = []
    for index in range(count):
        await gate.acquire()
        running.append(asyncio.create_task(_client(index, load, tally, gate)))
    await asyncio.gather(*running)
    elapsed = time.perf_counter() - started
    return {"connections": count, "connected": tally.connected, "produce_requests": tally.produced,
            "fetch_requests": tally.fetched, "fetch_not_yet_visible": tally.not_yet_visible,
            "requests_s": (tally.produced + tally.fetched) / elapsed,
            "mb_s": tally.bytes_moved / elapsed / 1e6, "errors": len(tally.errors),
            "error_samples": tally.errors[:5], "seconds": elapsed}


def busy_connections(host: str, port: int, topic: str, partitions: int = 3, count: int = 1000,
                     seconds: float = 60.0, interval: float = 1.0, records: int = 10, record_bytes: int = 100,
                     timeout: float = 30.0) -> dict[str, Any]:
    """`count` connections each producing and fetching once per `interval` s for `seconds` s."""
    return run_many_clients(_run(host, port, topic, partitions, count, seconds, interval, records, record_bytes,
                                 timeout))
