"""KIP-219 as written, in front of Apache Kafka: the request that crosses a quota is answered at once
with the whole throttle, and the connection is muted exactly that long.

Arithmetic (Kafka's default windows, 11 x 1 s; `steady`, the default algorithm): a new key may send
Kafka's first allowance at once, 10 windows x 10 kB/s = 100 kB; one Produce of 200 records of 1000 B
(~200 kB) crosses it by ~100 kB, a throttle of ~10 s. kqp forwards it as it is read, so the broker's
answer comes back at once (well under a second) telling ~10 s; a second request sent at once on the
same connection waits in the muted socket and is answered only when those ~10 s have passed. The
same holds for a Fetch whose ~200 kB response crosses a consumer quota of 10 kB/s, whichever
`fetch_throttle` applies: `deliver` hands the records over with the throttle, `empty` answers as the
broker would, without them; either at once. The client is a plain socket (helpers.raw_client), so
versions are chosen: Produce v5 (no client-side throttling) and v9, Fetch v11 and v12.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.raw_client import RawConnection, Tally
from helpers.topics import ensure_topic
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

QUOTA = 10_000           # bytes/s
RECORDS = 200            # of 1000 B: one ~200 kB batch
EXPECTED_S = 10.0        # (200 kB - 100 kB allowance) / 10 kB/s, a little less for the batch's overhead
AT_ONCE_S = 1.0


def batch(count: int, tag: bytes = b"x") -> bytes:
    builder = MemoryRecordsBuilder(2, 0, 16 << 20)
    now_ms = int(time.time() * 1000)
    for i in range(count):
        builder.append(now_ms, None, tag * 990 + b"%010d" % i)
    builder.close()
    return bytes(builder.buffer())


def produce(conn: RawConnection, version: int, topic: str, records: int) -> tuple[float, int]:
    """One acks=-1 Produce of `records` records: (seconds until its answer, its throttle_time_ms)."""
    data = ProduceRequest.TopicProduceData(name=topic, partition_data=[
        ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch(records))])
    began = time.monotonic()
    _, response = conn.call(ApiKey.Produce, version, "Produce", transactional_id=None, acks=-1, timeout_ms=30_000,
                            topic_data=[data])
    part = response.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert part.error_code == 0, f"Produce v{version}: error {part.error_code}"
    return time.monotonic() - began, int(response.throttle_time_ms)  # type: ignore[attr-defined]


def fetch(conn: RawConnection, version: int, topic: str) -> tuple[float, int, int]:
    """One Fetch from offset 0: (seconds until its answer, its throttle_time_ms, bytes of records)."""
    partition = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    began = time.monotonic()
    _, response = conn.call(ApiKey.Fetch, version, "Fetch", replica_id=-1, max_wait_ms=100, min_bytes=1,
                            max_bytes=8 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[partition])],
                            forgotten_topics_data=[], rack_id="")
    records = sum(len(p.records or b"") for t in response.responses for p in t.partitions)  # type: ignore[attr-defined]
    return time.monotonic() - began, int(response.throttle_time_ms), records  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", [5, 9])
def test_a_produce_over_quota_is_answered_at_once_with_the_whole_throttle(version: int, kqp: Callable[..., Any],
                                                                          kafka: Upstream) -> None:
    client = f"kip219-p{version}"
    proxy = kqp(kafka, {"entities": [{"client_id": client, "producer_byte_rate": QUOTA}]})
    topic = unique_topic("kip219-produce")
    ensure_topic(kafka, topic, 1, upstream_kind=kafka.kind)
    with RawConnection(proxy.bootstrap, client, Tally()) as lookup:
        leader = lookup.leader_address(topic)
    with RawConnection(leader, client, Tally(), timeout=60.0) as conn:
        seconds, throttle_ms = produce(conn, version, topic, RECORDS)
        print(f"Produce v{version}: answered in {seconds:.3f} s telling {throttle_ms} ms")
        assert seconds < AT_ONCE_S, f"answered after {seconds:.2f} s: held"
        assert throttle_ms >= 8_000, f"told {throttle_ms} ms for ~{EXPECTED_S:.0f} s of debt"
        # Sent at once: it waits in the muted socket for the whole throttle, then is answered at once.
        waited, _ = produce(conn, version, topic, 1)
        print(f"Produce v{version}: the next request answered {waited:.3f} s after it was sent")
        assert waited >= throttle_ms / 1000 - seconds - 0.05, f"read after {waited:.2f} s of a {throttle_ms} ms mute"
        assert waited < throttle_ms / 1000 + 2.0, f"read {waited:.2f} s later: held past the mute"


@pytest.mark.parametrize(("version", "mode"), [(11, "deliver"), (12, "empty")])
def test_a_fetch_over_quota_is_answered_at_once_with_the_whole_throttle(version: int, mode: str,
                                                                        kqp: Callable[..., Any],
                                                                        kafka: Upstream) -> None:
    client = f"kip219-f{version}"
    proxy = kqp(kafka, {"entities": [{"client_id": client, "consumer_byte_rate": QUOTA}]}, fetch_throttle=mode)
    topic = unique_topic("kip219-fetch")
    ensure_topic(kafka, topic, 1, upstream_kind=kafka.kind)
    with RawConnection(proxy.bootstrap, "kip219-loader", Tally()) as lookup:
        leader = lookup.leader_address(topic)
    with RawConnection(leader, "kip219-loader", Tally()) as loader:   # no quota: the data, one ~200 kB batch
        produce(loader, 9, topic, RECORDS)
    with RawConnection(leader, client, Tally(), timeout=60.0) as conn:
        # A new key may ask for its allowance (100 kB, kqp's cap on max_bytes); Kafka answers a first
        # batch larger than that whole, so the response crosses the quota.
        seconds, throttle_ms, records = fetch(conn, version, topic)
        print(f"Fetch v{version} ({mode}): answered in {seconds:.3f} s telling {throttle_ms} ms, {records} B")
        assert seconds < AT_ONCE_S, f"answered after {seconds:.2f} s: held"
        assert throttle_ms >= 8_000, f"told {throttle_ms} ms"
        assert (records > 150_000) if mode == "deliver" else (records == 0), f"{mode}: {records} bytes of records"
        waited, _, _ = fetch(conn, version, topic)
        print(f"Fetch v{version} ({mode}): the next request answered {waited:.3f} s after it was sent")
        assert waited >= throttle_ms / 1000 - seconds - 0.05, f"read after {waited:.2f} s of a {throttle_ms} ms mute"
        assert waited < throttle_ms / 1000 + 2.0, f"read {waited:.2f} s later: held past the mute"
