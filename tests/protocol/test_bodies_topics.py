"""The topic walk (kqp.protocol.topic_bytes): records bytes per topic, and a response's adaptive signals.

Every Produce request, Fetch response and Produce response version kqp serves is built by
kafka-python's encoder with topics whose names a cut can split, partitions with record data, with
none (null) and with an empty field; what the walk finds is compared with what kafka-python's decoder
says of the same bytes. Each frame is read whole, byte by byte, cut at every offset (split
flavour), with trailing bytes; a truncated one must fail in both flavours; and the split flavour must
copy no more than a name's bytes or a batch header, never record data.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from codec_support import response_frame
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder
from test_bodies_parts import byte_by_byte, copies, cut, single_cuts  # noqa: F401 - copies is a fixture

from kqp.protocol.apis import ApiKey
from kqp.protocol.errors import BodyError
from kqp.protocol.headers import response_body_offset
from kqp.protocol.schemas import schema_versions
from kqp.protocol.topic_bytes import fetch_response_topics, produce_request_topics, produce_response_signals

NAMES = ("events", "logs-a-rather-long-topic-name-so-that-cuts-land-inside-it")
IDS = (uuid.UUID(int=0x1234), uuid.UUID(int=0xABCDEF))


def batches(magic: int, count: int, offset: int = 0) -> bytes:
    builder = MemoryRecordsBuilder(magic, 0, 1 << 20, offset=offset)
    for i in range(count):
        builder.append(1_700_000_000_000 + i, None, b"v" * (5 + i * 11 % 17))
    builder.close()
    return bytes(builder.buffer())


def key(version: int, i: int, field: str) -> dict[str, Any]:
    return {"topic_id": IDS[i]} if version >= 13 else {field: NAMES[i]}


def topic_of(version: int, i: int) -> str | uuid.UUID:
    return IDS[i] if version >= 13 else NAMES[i]


def produce_frame(version: int) -> tuple[bytes, int, dict[str | uuid.UUID, int]]:
    magic = 2 if version >= 3 else 1
    part = ProduceRequest.TopicProduceData.PartitionProduceData
    records = [[batches(magic, 3), None, batches(magic, 1) + batches(magic, 2, 1)], [b"", batches(magic, 4)]]
    topics = [ProduceRequest.TopicProduceData(partition_data=[part(index=p, records=r) for p, r in enumerate(rs)],
                                              **key(version, i, "name")) for i, rs in enumerate(records)]
    # The first topic again: a topic may appear twice; its bytes add up.
    topics.append(ProduceRequest.TopicProduceData(partition_data=[part(index=3, records=batches(magic, 2))],
                                                  **key(version, 0, "name")))
    body = ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=1, topic_data=topics).encode(version=version)
    head = struct.pack(">hhih", ApiKey.Produce, version, 5, 6) + b"client" + (b"\x00" if version >= 9 else b"")
    frame = struct.pack(">i", len(head) + len(body)) + head + bytes(body)
    expected: dict[str | uuid.UUID, int] = {}
    for topic in ProduceRequest.decode(bytes(body), version=version).topic_data:
        name = topic.topic_id if version >= 13 else topic.name
        expected[name] = expected.get(name, 0) + sum(len(p.records or b"") for p in topic.partition_data)
    return frame, 4 + len(head), expected


def fetch_frame(version: int, watermark: int) -> tuple[bytes, int, dict[str | uuid.UUID, int]]:
    """Two topics; partition 0 of the first returns offsets 0..4 (batches of 3 and 2) under
    `watermark`, the others return records up to their watermark or none."""
    magic = 2 if version >= 4 else 1
    data = FetchResponse.FetchableTopicResponse.PartitionData
    first = [data(partition_index=0, high_watermark=watermark, records=batches(magic, 3) + batches(magic, 2, 3),
                  aborted_transactions=[data.AbortedTransaction(producer_id=1, first_offset=2)]),
             data(partition_index=1, error_code=6, high_watermark=-1, records=None)]
    second = [data(partition_index=0, high_watermark=4, records=batches(magic, 4)),
              data(partition_index=1, high_watermark=0, records=b"")]
    topics = [FetchResponse.FetchableTopicResponse(partitions=parts, **key(version, i, "topic"))
              for i, parts in enumerate((first, second))]
    message = FetchResponse(throttle_time_ms=250, error_code=0, session_id=7, responses=topics)
    frame = bytes(response_frame(ApiKey.Fetch, version, message))
    offset = response_body_offset(ApiKey.Fetch, version, frame)
    expected = {}
    for topic in FetchResponse.decode(frame[offset:], version=version).responses:
        name = topic.topic_id if version >= 13 else topic.topic
        expected[name] = sum(len(p.records or b"") for p in topic.partitions)
    return frame, offset, expected


def readings(read: Any, version: int, frame: bytes, offset: int) -> list[Any]:
    """What `read` finds in `frame` whole, with trailing bytes, byte by byte and at every single cut."""
    whole = [(memoryview(frame),), (memoryview(frame + b"\x00\x01trailing"),)]
    return [read(version, parts, offset) for parts in [*whole, byte_by_byte(frame), *single_cuts(frame)]]


@pytest.mark.parametrize("version", schema_versions("ProduceRequest"))
def test_produce_request_bytes_per_topic_every_version(version: int, copies: list[int]) -> None:  # noqa: F811
    frame, offset, expected = produce_frame(version)
    assert len(expected) == 2 and all(expected.values())
    for found in readings(produce_request_topics, version, frame, offset):
        # The repeated topic is summed; the empty and null records fields add nothing.
        assert found.topics() == list(expected.items())
        assert found.records_bytes == sum(expected.values())
    assert max(copies, default=0) <= len(NAMES[1]) + 5   # a name (or a length), never record data


@pytest.mark.parametrize("version", schema_versions("FetchResponse"))
@pytest.mark.parametrize(("watermark", "more"), [(5, False), (9, True)])
def test_fetch_response_bytes_per_topic_and_whether_more_was_there(version: int, watermark: int, more: bool,
                                                                   copies: list[int]) -> None:  # noqa: F811
    frame, offset, expected = fetch_frame(version, watermark)
    for found in readings(fetch_response_topics, version, frame, offset):
        assert found.topics() == list(expected.items())
        # The first partition ends at offset 4: a watermark of 5 is all there was, 9 is more.
        assert found.more is more
        assert found.throttle_ms == (250 if version >= 1 else 0)
    assert max(copies, default=0) <= max(len(NAMES[1]) + 5, 27)   # a name, a length, or a batch header


@pytest.mark.parametrize("version", schema_versions("ProduceResponse"))
def test_produce_response_throttle_and_timed_out_partitions(version: int) -> None:
    part = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    topics = [ProduceResponse.TopicProduceResponse(partition_responses=[
        part(index=0, error_code=7, base_offset=1), part(index=1, error_code=0, base_offset=2),
        part(index=2, error_code=7, base_offset=3)], **key(version, i, "name")) for i in range(2)]
    message = ProduceResponse(responses=topics, throttle_time_ms=40)
    frame = bytes(response_frame(ApiKey.Produce, version, message))
    offset = response_body_offset(ApiKey.Produce, version, frame)
    for found in readings(produce_response_signals, version, frame, offset):
        assert found.timeouts == 4
        assert found.throttle_ms == (40 if version >= 1 else 0)


@pytest.mark.parametrize(("read", "build"), [
    (produce_request_topics, lambda v: produce_frame(v)[:2]),
    (fetch_response_topics, lambda v: fetch_frame(v, 9)[:2]),
])
def test_a_truncated_frame_is_a_body_error_in_both_flavours(read: Any, build: Any) -> None:
    for version in (0, 4, 9, 12, 13):
        frame, offset = build(version)
        for stop in range(offset, len(frame), 7):
            short = frame[:stop]
            with pytest.raises(BodyError):
                read(version, (memoryview(short),), offset)
            with pytest.raises(BodyError):
                read(version, cut(short, range(offset + 1, stop, 5)), offset)


def test_an_unknown_version_is_a_body_error() -> None:
    frame, offset, _ = produce_frame(9)
    with pytest.raises(BodyError, match="no version 99"):
        produce_request_topics(99, (memoryview(frame),), offset)
