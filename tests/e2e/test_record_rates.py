"""Record and batch rate quotas (KIP-731's vocabulary) with real clients through kqp.

kqp counts records and batches from the RecordBatch headers of Produce requests and Fetch
responses, without decompressing anything, so the producers here send 50-byte records in large
lz4 and zstd batches: what is counted is the header's record count, not bytes.

How the rate is judged. Kafka's sampled-rate quota records a request first and throttles after,
so a client may burst up to about one quota span (window_count x window_size) of records before
its first throttle, and again whenever an old burst ages out of the span: the rate it achieves is
the quota on average over whole spans, with bursts inside them. A measurement over S seconds is
therefore off by up to about one span's worth of records; with the 0.6 s span used here (3
windows of 0.2 s) a 6 s measurement resolves 10%. The producer writes to one partition so that one
connection carries the load: over several connections each one's request in flight is admitted
before any throttle (Kafka's semantics too), which adds a connection-count-dependent overshoot
this test does not mean to measure.

Also asserted: no message lost or duplicated (everything is read back), no request timed out
(librdkafka's own counters), and the client saw throttle_time_ms.
"""

from __future__ import annotations

import bisect
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from helpers.names import unique_group, unique_topic
from helpers.topics import ensure_topic

pytestmark = pytest.mark.e2e

WINDOW = 0.2
WINDOWS = 3
SPAN = WINDOW * WINDOWS
WARMUP = 2.0          # past the first burst and its throttle
MEASURE = 6.0
RECORD_BYTES = 50


def quotas(client_id: str, **quota: float) -> dict[str, Any]:
    return {"window_size_seconds": WINDOW, "window_count": WINDOWS,
            "entities": [{"client_id": client_id, **quota}]}


def record_value(n: int, salt: str) -> bytes:
    # 50 bytes: a sequence number (for the loss/duplicate check) and a random-looking tail, so
    # batches compress but not to nothing.
    return f"{n:010d}-{salt}".encode()[:RECORD_BYTES].ljust(RECORD_BYTES, b".")


@dataclass
class ClientStats:
    """What librdkafka's statistics callback reported: request timeouts and throttle seen."""

    req_timeouts: int = 0
    throttle_max_ms: float = 0.0
    raw: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, payload: str) -> None:
        doc = json.loads(payload)
        for broker in doc.get("brokers", {}).values():
            self.req_timeouts = max(self.req_timeouts, int(broker.get("req_timeouts", 0)))
            self.throttle_max_ms = max(self.throttle_max_ms, float(broker.get("throttle", {}).get("max", 0)))


def rate_between(stamps: list[float], start: float, end: float) -> float:
    return (bisect.bisect_left(stamps, end) - bisect.bisect_left(stamps, start)) / (end - start)


def produce_flat_out(bootstrap: str, topic: str, client_id: str, seconds: float, limit: int | None = None,
                     **conf: Any) -> tuple[list[float], int, ClientStats, float]:
    """Produce to partition 0 as fast as the client can for `seconds` (or `limit` records);
    delivery times, count sent, stats, start time. Every record must be delivered without error."""
    stats = ClientStats()
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 50,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 20_000,
                         "statistics.interval.ms": 500, "stats_cb": stats, **conf})
    delivered: list[float] = []
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append(time.monotonic())

    salt = os.urandom(24).hex()
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds and (limit is None or sent < limit):
        try:
            producer.produce(topic, partition=0, value=record_value(sent, salt), on_delivery=on_delivery)
            sent += 1
        except BufferError:
            producer.poll(0.005)
        if sent % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0, "records still undelivered 30 s after the producer stopped"
    producer.poll(0.6)                 # one more statistics callback
    assert not errors, f"delivery errors: {errors[:5]}"
    return delivered, sent, stats, started


def read_back(bootstrap: str, topic: str, count: int, client_id: str = "reader",
              timeout: float = 60.0, **conf: Any) -> tuple[list[float], list[bytes], ClientStats]:
    """Every record of partition 0 from the start: receive times and values."""
    stats = ClientStats()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("rr"), "client.id": client_id,
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "statistics.interval.ms": 500, "stats_cb": stats, **conf})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    stamps: list[float] = []
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                assert msg.error() is None, msg.error()
                stamps.append(time.monotonic())
                values.append(msg.value())
        consumer.poll(0.6)
    finally:
        consumer.close()
    return stamps, values, stats


def assert_exactly_once(values: list[bytes], sent: int) -> None:
    numbers = Counter(int(v[:10]) for v in values)
    duplicated = [n for n, c in numbers.items() if c > 1]
    assert not duplicated, f"records read more than once: {duplicated[:10]}"
    missing = sorted(set(range(sent)) - set(numbers))
    assert not missing, f"{len(missing)} of {sent} records lost, e.g. {missing[:10]}"
    assert len(numbers) == sent


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_producer_record_rate(codec: str, mock_cluster: str, kqp) -> None:
    quota = 20_000
    proxy = kqp(mock_cluster, quotas("rr-producer", producer_record_rate=quota))
    topic = unique_topic(f"records-{codec}")
    ensure_topic(proxy.bootstrap, topic, 1, upstream_kind=mock_cluster.kind)
    delivered, sent, stats, t0 = produce_flat_out(proxy.bootstrap, topic, "rr-producer", WARMUP + MEASURE,
                                                  **{"compression.type": codec, "batch.num.messages": 2000})
    achieved = rate_between(delivered, t0 + WARMUP, t0 + WARMUP + MEASURE)
    assert abs(achieved - quota) <= 0.1 * quota, f"{codec}: {achieved:.0f} records/s against a quota of {quota}"
    assert stats.req_timeouts == 0 and stats.throttle_max_ms > 0
    _, values, _ = read_back(proxy.bootstrap, topic, sent)
    assert_exactly_once(values, sent)


def test_producer_batch_rate(mock_cluster: str, kqp) -> None:
    quota, per_batch = 10, 500        # 10 batches/s of 500 records: 5000 records/s
    proxy = kqp(mock_cluster, quotas("rb-producer", producer_batch_rate=quota))
    topic = unique_topic("batches")
    ensure_topic(proxy.bootstrap, topic, 1, upstream_kind=mock_cluster.kind)
    # The producer offers far more than 5000 records/s, so every batch fills up to
    # batch.num.messages before linger.ms: batches/s = records/s / 500.
    delivered, sent, stats, t0 = produce_flat_out(proxy.bootstrap, topic, "rb-producer", WARMUP + MEASURE,
                                                  **{"compression.type": "zstd", "batch.num.messages": per_batch,
                                                     "queue.buffering.max.messages": 8 * per_batch})
    achieved = rate_between(delivered, t0 + WARMUP, t0 + WARMUP + MEASURE) / per_batch
    assert abs(achieved - quota) <= 0.1 * quota, f"{achieved:.2f} batches/s against a quota of {quota}"
    assert stats.req_timeouts == 0 and stats.throttle_max_ms > 0
    _, values, _ = read_back(proxy.bootstrap, topic, sent)
    assert_exactly_once(values, sent)


def test_consumer_record_rate(mock_cluster: str, kqp) -> None:
    quota = 20_000
    proxy = kqp(mock_cluster, quotas("rr-consumer", consumer_record_rate=quota))
    topic = unique_topic("consumed")
    ensure_topic(proxy.bootstrap, topic, 1, upstream_kind=mock_cluster.kind)
    # Written by an unlimited client: 8 s of the consumer's quota, in large lz4 batches.
    count = int(quota * (WARMUP + MEASURE))
    _, sent, _, _ = produce_flat_out(proxy.bootstrap, topic, "writer", 30, limit=count,
                                     **{"compression.type": "lz4", "batch.num.messages": 2000})
    assert sent == count
    # Small fetches (64 KiB from the one partition) so one response is a small part of a span.
    stamps, values, stats = read_back(proxy.bootstrap, topic, sent, client_id="rr-consumer",
                                      **{"max.partition.fetch.bytes": 65536})
    assert_exactly_once(values, sent)
    end = stamps[-1]
    achieved = rate_between(stamps, stamps[0] + WARMUP, end)
    assert abs(achieved - quota) <= 0.1 * quota, f"{achieved:.0f} records/s read against a quota of {quota}"
    assert stats.req_timeouts == 0 and stats.throttle_max_ms > 0
