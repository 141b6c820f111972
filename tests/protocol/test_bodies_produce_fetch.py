"""Produce and Fetch body readers against kafka-python's encoder and decoder, at every version.

Each body is built with kafka-python's message classes (the same JSON schemas Apache Kafka
generates its code from), with record data from kafka-python's record builders, and every
optional part a version allows filled in: transactional ids, topic ids (v13), aborted
transactions, tagged fields, node endpoints. The readers must agree with kafka-python's decode.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from kqp.protocol.fetch import (
    FETCH_REQUEST_VERSIONS,
    FETCH_RESPONSE_VERSIONS,
    cap_fetch_max_bytes,
    empty_fetch_response,
    fetch_max_bytes,
    fetch_response_counts,
)
from kqp.protocol.produce import PRODUCE_VERSIONS, produce_acks, produce_request_counts
from kqp.protocol.records import BodyError, RecordCounts

TopicData = ProduceRequest.TopicProduceData
PartitionProduce = TopicData.PartitionProduceData
FetchTopicResponse = FetchResponse.FetchableTopicResponse
PartitionData = FetchTopicResponse.PartitionData


def build(magic: int, compression: int, n: int, offset: int = 0) -> bytes:
    builder = MemoryRecordsBuilder(magic, compression, 1 << 20, offset=offset)
    for i in range(n):
        builder.append(1_700_000_000_000 + i, None, b"v%d" % i)
    builder.close()
    return bytes(builder.buffer())


def magic_for(version: int) -> int:
    return 2 if version >= 3 else 1  # Produce v3 / Fetch v4 brought message format v2


def topic_key(version: int, i: int, name_field: str = "name") -> dict:
    # Topic ids replace names from Produce v13 and Fetch v13 (KIP-516).
    return {"topic_id": uuid.UUID(int=i + 1)} if version >= 13 else {name_field: f"topic-{i}"}


def produce_body(version: int, acks: int = -1, transactional_id: str | None = "tx-1") -> tuple[bytes, RecordCounts]:
    magic = magic_for(version)
    # Per topic: 3 uncompressed + 5 gzip + a null records field. Magic 1 counts each of the 3
    # plain messages and the one gzip wrapper (shallow), magic 2 counts both batches' records.
    per_topic = RecordCounts(4, 4) if magic == 1 else RecordCounts(8, 2)
    topics = [
        TopicData(
            partition_data=[
                PartitionProduce(index=0, records=build(magic, 0, 3)),
                PartitionProduce(index=1, records=build(magic, 1, 5)),
                PartitionProduce(index=2, records=None),
            ],
            **topic_key(version, i),
        )
        for i in range(3)
    ]
    request = ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=30_000, topic_data=topics)
    expected = RecordCounts(per_topic.records * 3, per_topic.batches * 3)
    return bytes(request.encode(version=version)), expected


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_every_version(version: int, acks: int) -> None:
    for transactional_id in (None, "a-transactional-id"):
        body, _ = produce_body(version, acks, transactional_id)
        decoded = ProduceRequest.decode(body, version=version)
        assert produce_acks(version, memoryview(body)) == acks == decoded.acks


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_counts_every_version(version: int) -> None:
    body, expected = produce_body(version)
    assert produce_request_counts(version, memoryview(body)) == expected
    # Trailing bytes after a complete body are not read (Kafka's parser ignores them too).
    assert produce_request_counts(version, memoryview(body + b"\x00junk")) == expected


@pytest.mark.parametrize("version", [3, 9, 13])
def test_produce_truncated_anywhere_is_a_body_error(version: int) -> None:
    body, _ = produce_body(version)
    for cut in range(len(body)):
        with pytest.raises(BodyError):
            produce_request_counts(version, memoryview(body)[:cut])
    acks_end = (2 + len("tx-1") if version < 9 else 1 + len("tx-1")) + 2
    for cut in range(acks_end):
        with pytest.raises(BodyError):
            produce_acks(version, memoryview(body)[:cut])


def test_produce_unknown_version_is_a_body_error() -> None:
    body, _ = produce_body(9)
    with pytest.raises(BodyError):
        produce_request_counts(PRODUCE_VERSIONS.stop, memoryview(body))


def fetch_request(version: int, max_bytes: int = 50 << 20, min_bytes: int = 1, replica_id: int = -1) -> FetchRequest:
    topics = [
        FetchRequest.FetchTopic(
            partitions=[
                FetchRequest.FetchTopic.FetchPartition(partition=p, fetch_offset=100, partition_max_bytes=1 << 20)
                for p in range(3)
            ],
            **topic_key(version, i, "topic"),
        )
        for i in range(2)
    ]
    return FetchRequest(
        replica_id=replica_id, max_wait_ms=500, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=1,
        session_id=7, session_epoch=3, topics=topics, forgotten_topics_data=[], rack_id="rack-a",
        cluster_id="cluster-x",
    )  # fmt: skip


@pytest.mark.parametrize("version", FETCH_REQUEST_VERSIONS)
def test_fetch_max_bytes_every_version(version: int) -> None:
    body = bytes(fetch_request(version, max_bytes=123_456).encode(version=version))
    expected = 123_456 if version >= 3 else None
    assert fetch_max_bytes(version, memoryview(body)) == expected


@pytest.mark.parametrize("version", FETCH_REQUEST_VERSIONS)
def test_cap_fetch_max_bytes_every_version(version: int) -> None:
    body = bytes(fetch_request(version, max_bytes=50 << 20, min_bytes=2 << 20).encode(version=version))
    capped = cap_fetch_max_bytes(version, memoryview(body), 1 << 20)
    if version < 3:
        assert capped is None
        return
    assert capped is not None and len(capped) == len(body)
    before = FetchRequest.decode(body, version=version)
    after = FetchRequest.decode(capped, version=version)
    # As KafkaApis: max_bytes = min(max_bytes, cap), min_bytes = min(min_bytes, max_bytes);
    # partition max bytes and everything else untouched.
    assert after.max_bytes == 1 << 20
    assert after.min_bytes == 1 << 20
    before.max_bytes = before.min_bytes = 1 << 20
    assert after == before


def test_cap_keeps_small_min_bytes_and_skips_when_under_cap() -> None:
    body = bytes(fetch_request(11, max_bytes=50 << 20, min_bytes=1).encode(version=11))
    capped = cap_fetch_max_bytes(11, memoryview(body), 4096)
    assert capped is not None
    after = FetchRequest.decode(capped, version=11)
    assert (after.max_bytes, after.min_bytes) == (4096, 1)
    assert cap_fetch_max_bytes(11, memoryview(body), 50 << 20) is None  # equal: unchanged
    assert cap_fetch_max_bytes(11, memoryview(body), 60 << 20) is None


def test_follower_fetch_is_not_capped() -> None:
    body = bytes(fetch_request(11, replica_id=2).encode(version=11))
    assert cap_fetch_max_bytes(11, memoryview(body), 1024) is None


def test_cap_rejects_negative_cap() -> None:
    body = bytes(fetch_request(11).encode(version=11))
    with pytest.raises(ValueError):
        cap_fetch_max_bytes(11, memoryview(body), -1)


def fetch_response(version: int, session_id: int = 99, error_code: int = 0) -> tuple[FetchResponse, RecordCounts]:
    magic = 2 if version >= 4 else 1
    partitions = []
    expected = RecordCounts()
    for p in range(3):
        whole = build(magic, 0, 4) + build(magic, 1, 6, offset=4)
        # The second partition ends with a partial batch, as a response cut at max bytes does.
        records = whole + build(magic, 0, 2, offset=10)[:30] if p == 1 else whole
        expected.records += 4 + 6 if magic == 2 else 4 + 1
        expected.batches += 2 if magic == 2 else 5
        partitions.append(
            PartitionData(
                partition_index=p, error_code=0, high_watermark=1000, last_stable_offset=900,
                log_start_offset=0, aborted_transactions=[PartitionData.AbortedTransaction(
                    producer_id=5, first_offset=17)] * p or None,
                diverging_epoch=PartitionData.EpochEndOffset(epoch=3, end_offset=77) if p == 0 else None,
                current_leader=PartitionData.LeaderIdAndEpoch(leader_id=1, leader_epoch=2),
                snapshot_id=PartitionData.SnapshotId(end_offset=5, epoch=1) if p == 2 else None,
                preferred_read_replica=-1, records=records,
            )
        )  # fmt: skip
    partitions.append(PartitionData(partition_index=3, error_code=1, high_watermark=-1, records=None))
    responses = [FetchTopicResponse(partitions=partitions, **topic_key(version, i, "topic")) for i in range(2)]
    endpoints = [FetchResponse.NodeEndpoint(node_id=1, host="broker-1", port=9092, rack=None)]
    response = FetchResponse(
        throttle_time_ms=0, error_code=error_code, session_id=session_id, responses=responses,
        node_endpoints=endpoints,
    )
    return response, RecordCounts(expected.records * 2, expected.batches * 2)


@pytest.mark.parametrize("version", FETCH_RESPONSE_VERSIONS)
def test_fetch_response_counts_every_version(version: int) -> None:
    response, expected = fetch_response(version)
    body = bytes(response.encode(version=version))
    decoded = FetchResponse.decode(body, version=version)
    assert sum(len(t.partitions) for t in decoded.responses) == 8  # kafka-python agrees on shape
    assert fetch_response_counts(version, memoryview(body)) == expected


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_fetch_response_truncated_anywhere_is_a_body_error(version: int) -> None:
    response, _ = fetch_response(version)
    body = bytes(response.encode(version=version))
    for cut in range(len(body)):
        with pytest.raises(BodyError):
            fetch_response_counts(version, memoryview(body)[:cut])


@pytest.mark.parametrize("version", FETCH_RESPONSE_VERSIONS)
def test_empty_fetch_response_every_version(version: int) -> None:
    response, _ = fetch_response(version, session_id=4242, error_code=71)
    header = struct.pack(">i", 7) + (b"\x00" if version >= 12 else b"")  # correlation id (+ tags from v12)
    body = bytes(response.encode(version=version))
    frame = memoryview(struct.pack(">i", len(header) + len(body)) + header + body)
    empty = empty_fetch_response(version, (frame,), 4 + len(header), throttle_ms=1500)
    # A whole frame: a new size prefix, the upstream's header, the empty body.
    assert struct.unpack_from(">i", empty)[0] == len(empty) - 4 and empty[4 : 4 + len(header)] == header
    decoded = FetchResponse.decode(empty[4 + len(header) :], version=version)
    assert decoded.responses == []
    assert fetch_response_counts(version, memoryview(empty)[4 + len(header) :]) == RecordCounts(0, 0)
    if version >= 1:
        assert decoded.throttle_time_ms == 1500
    if version >= 7:
        # The upstream's session (and its error, e.g. INVALID_FETCH_SESSION_EPOCH) is kept.
        assert (decoded.session_id, decoded.error_code) == (4242, 71)
    if version >= 16:
        assert decoded.node_endpoints == []


def test_empty_fetch_response_of_truncated_body_is_a_body_error() -> None:
    response, _ = fetch_response(12)
    frame = memoryview(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00" + bytes(response.encode(version=12)))
    with pytest.raises(BodyError):
        empty_fetch_response(12, (frame[: 9 + 8],), 9, throttle_ms=10)
    with pytest.raises(BodyError):
        empty_fetch_response(12, (frame[:7],), 9, throttle_ms=10)  # the frame ends inside its header
