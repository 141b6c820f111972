"""Large Fetch responses pass on to real consumers as they arrive, intact and counted.

A real kqp in front of Tansu (which answers Fetch up to v17, so NodeEndpoints' tag section ends each
response) with the metrics on: responses of about 1 MiB and more stream (proxy/connection/streaming.py).
librdkafka reads a backlog with `check.crcs`, so a byte out of place anywhere in a batch fails its
read; the raw client counts what it reads, and kqp's record counter, taken as the responses passed,
must equal it exactly.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, KafkaError
from helpers.names import unique_group, unique_topic
from helpers.observability import sample, scrape, start_with_metrics
from helpers.raw_client import RawConnection, Tally
from helpers.topics import ensure_topic

pytestmark = pytest.mark.e2e

REQUESTS, RECORDS, VALUE = 10, 400, 2_000   # 8 MB in 10 batches of 800 KB
TOTAL = REQUESTS * RECORDS
READ_TIMEOUT = 60.0


def value_of(i: int, j: int) -> bytes:
    head = b"%d-%d:" % (i, j)
    return head + bytes([(i * 31 + j) % 251]) * (VALUE - len(head))


def aiokafka_read(bootstrap: str, topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer

    async def run() -> list[bytes]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, client_id="aiokafka-reader",
                                    auto_offset_reset="earliest", check_crcs=True, fetch_max_bytes=16 << 20,
                                    max_partition_fetch_bytes=8 << 20)
        await consumer.start()
        out: list[bytes] = []
        deadline = time.monotonic() + READ_TIMEOUT
        try:
            while len(out) < TOTAL and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(r.value for r in records)
        finally:
            await consumer.stop()
        return out

    return asyncio.run(run())


def test_large_fetches_stream_to_real_consumers_intact_and_counted(tansu, kqp) -> None:
    proxy, url = start_with_metrics(kqp, tansu, quotas={"window_size_seconds": 0.2, "window_count": 6})
    topic = unique_topic("stream")
    ensure_topic(proxy.bootstrap, topic, 1, upstream_kind=tansu.kind)
    tally = Tally()
    with RawConnection(proxy.bootstrap, "raw-reader", tally) as boot:
        leader = boot.leader_address(topic)
    with RawConnection(leader, "raw-reader", tally) as conn:
        for i in range(REQUESTS):
            conn.produce(topic, [value_of(i, j) for j in range(RECORDS)])
        offset, deadline = 0, time.monotonic() + READ_TIMEOUT
        while offset < TOTAL and time.monotonic() < deadline:
            _, offset = conn.fetch(topic, offset)
    assert offset == TOTAL, f"the raw client read up to offset {offset}"

    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique_group("stream"),
                         "client.id": "librdkafka-reader", "auto.offset.reset": "earliest", "check.crcs": True,
                         "max.partition.fetch.bytes": 8 << 20, "fetch.max.bytes": 16 << 20,
                         "enable.auto.commit": False})
    seen: dict[bytes, int] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + READ_TIMEOUT
        while len(seen) < TOTAL and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None or msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            if msg.error() is None:
                value = msg.value()
                seen[value] = seen.get(value, 0) + 1
    finally:
        consumer.close()
    expected = {value_of(i, j) for i in range(REQUESTS) for j in range(RECORDS)}
    assert set(seen) == expected and set(seen.values()) == {1}, "every record read once, byte for byte"
    # aiokafka speaks an older Fetch (no tag sections) and checks each batch's CRC as well.
    read = aiokafka_read(proxy.bootstrap, topic)
    assert sorted(read) == sorted(expected)

    samples = scrape(url)
    # Tansu answers a backlog in a few large responses (8 MB in two: it reads past partition_max_bytes),
    # so each of the three readers' first responses stream.
    assert (sample(samples, "kqp_streamed_responses_total", api="Fetch") or 0) >= 3
    raw = sample(samples, "kqp_records_total", direction="fetch", user="ANONYMOUS", client_id="raw-reader")
    assert raw == tally.fetch_records >= TOTAL   # counted as they passed, exactly
    rdkafka = sample(samples, "kqp_records_total", direction="fetch", user="ANONYMOUS", client_id="librdkafka-reader")
    assert rdkafka is not None and rdkafka >= TOTAL
