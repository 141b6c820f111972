"""Behaviour of the per-frame hot path's fast paths (tables, compiled walks, early exits), not timing.

Each fast path is checked against the slow, general answer it replaces: the request-header table
against :mod:`kqp.protocol.apis`, the compiled walk to acks against kafka-python's decode, the
NodeEndpoints early exit against a response that has the tag, and the frame reader's
whole-chunk case against the byte stream. Timing lives in ``bench_hot_path.py``.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from codec_support import response_frame
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from kqp.protocol.addresses import rewrite_addresses
from kqp.protocol.apis import kqp_ranges, request_header_version, response_header_version
from kqp.protocol.errors import FrameTooLarge, ProtocolError, UnsupportedApi
from kqp.protocol.fetch import fetch_response_counts
from kqp.protocol.frames import FrameReader
from kqp.protocol.headers import (
    RequestHeader,
    encode_request_header,
    parse_request_header,
    response_body_offset,
)
from kqp.protocol.produce import PRODUCE_VERSIONS, produce_acks
from kqp.protocol.records import BodyError, RecordCounts

ALL = [(k, v) for k, (lo, hi) in kqp_ranges().items() for v in range(lo, hi + 1)]


def request(api_key: int, version: int, body: bytes = b"BODY", client_id: str | None = "c") -> memoryview:
    head = encode_request_header(api_key, version, 77, client_id)
    return memoryview(struct.pack(">i", len(head) + len(body)) + head + body)


@pytest.mark.parametrize(("api_key", "version"), ALL)
def test_header_table_agrees_with_the_api_tables(api_key: int, version: int) -> None:
    frame = request(api_key, version)
    tagged = request_header_version(api_key, version) == 2
    header = parse_request_header(frame)
    assert header == RequestHeader(api_key, version, 77, "c", 4 + 2 + 2 + 4 + 2 + 1 + tagged)
    assert bytes(frame[header.body_offset :]) == b"BODY"
    # Response side: header v1 (tagged fields) exactly where apis says so.
    response = memoryview(struct.pack(">ii", 5, 77) + b"\x00")
    expected = 9 if response_header_version(api_key, version) == 1 else 8
    assert response_body_offset(api_key, version, response) == expected


def test_request_header_is_an_immutable_named_tuple() -> None:
    header = parse_request_header(request(0, 9))
    assert isinstance(header, tuple) and header.api_key == 0 and header._fields[-1] == "body_offset"
    with pytest.raises(AttributeError):
        header.api_key = 1  # type: ignore[misc]


def test_versions_outside_the_table_take_the_slow_path() -> None:
    hi = kqp_ranges()[18][1]
    newer = memoryview(struct.pack(">ihhih", 10, 18, hi + 1, 5, -1) + b"\x00")
    assert parse_request_header(newer) == RequestHeader(18, hi + 1, 5, None, 15)
    for api_key, version in [(0, kqp_ranges()[0][1] + 1), (-1, 0), (9999, 0), (0, -1)]:
        with pytest.raises(UnsupportedApi):
            parse_request_header(memoryview(struct.pack(">ihhih", 10, api_key, version, 5, -1)))


def test_header_tagged_fields_present_and_truncated() -> None:
    frame = bytearray(request(0, 9, body=b""))
    frame[-1:] = b"\x01\x07\x02ab"  # one tag (7) of two bytes in the request header
    frame[:4] = struct.pack(">i", len(frame) - 4)
    assert parse_request_header(memoryview(frame)).body_offset == len(frame)
    for cut in range(14, len(frame)):
        with pytest.raises(ProtocolError):
            parse_request_header(memoryview(frame)[:cut])
    with pytest.raises(ProtocolError):
        response_body_offset(0, 9, memoryview(struct.pack(">ii", 4, 1)))


def test_response_body_offset_of_an_unknown_api_is_refused() -> None:
    with pytest.raises(UnsupportedApi):
        response_body_offset(9999, 0, memoryview(b"\x00" * 12))


def records(n: int, size: int = 10) -> bytes:
    builder = MemoryRecordsBuilder(2, 0, 1 << 22)
    for i in range(n):
        builder.append(i, None, b"x" * size)
    builder.close()
    return bytes(builder.buffer())


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "", "t" * 200])  # 200: a two-byte varint length
def test_compiled_walk_to_acks_agrees_with_kafka_python(version: int, transactional_id: str | None) -> None:
    part = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records(1))
    key = {"topic_id": uuid.UUID(int=1)} if version >= 13 else {"name": "t"}
    topic = ProduceRequest.TopicProduceData(partition_data=[part], **key)
    body = ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=1, topic_data=[topic])
    data = bytes(body.encode(version=version))
    assert produce_acks(version, memoryview(data)) == -1 == ProduceRequest.decode(data, version=version).acks
    with pytest.raises(BodyError):
        produce_acks(PRODUCE_VERSIONS.stop, memoryview(data))


def fetch_frame(version: int, partitions: int, blob: bytes, endpoints: bool) -> memoryview:
    data = FetchResponse.FetchableTopicResponse.PartitionData
    parts = [data(partition_index=p, error_code=0, high_watermark=1, records=blob) for p in range(partitions)]
    topic = FetchResponse.FetchableTopicResponse(topic_id=uuid.UUID(int=3), topic="t", partitions=parts)
    extra = {}
    if endpoints:
        node = FetchResponse.NodeEndpoint(node_id=4, host="upstream.example", port=9092, rack=None)
        extra["node_endpoints"] = [node]
    message = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[topic], **extra)
    return response_frame(1, version, message)


def to_kqp(node_id: int, host: str, port: int) -> tuple[str, int]:
    return "kqp.local", port + 1


@pytest.mark.parametrize("version", [16, 17, 18])
def test_node_endpoints_check_never_reads_record_data(version: int) -> None:
    # Record data that is not record batches at all (size field below the minimum): counting
    # rejects it, the address check skips it by its length and never notices.
    garbage = b"\x00" * 8 + struct.pack(">i", 3) + b"\xff" * 20_000  # 3-byte varint length
    frame = fetch_frame(version, 30, garbage, endpoints=False)
    offset = response_body_offset(1, version, frame)
    assert rewrite_addresses(1, version, frame, offset, to_kqp) == (None, [])
    with pytest.raises(BodyError):
        fetch_response_counts(version, frame[offset:])


@pytest.mark.parametrize("version", [16, 17, 18])
def test_node_endpoints_behind_large_records_are_found(version: int) -> None:
    blob = records(40, 1000)  # ~40 KB: the records length needs a three-byte varint
    frame = fetch_frame(version, 3, blob, endpoints=True)
    offset = response_body_offset(1, version, frame)
    new, seen = rewrite_addresses(1, version, frame, offset, to_kqp)
    assert [(b.node_id, b.host, b.port) for b in seen] == [(4, "upstream.example", 9092)]
    assert new is not None and b"upstream.example" not in new and b"kqp.local" in new
    decoded = FetchResponse.decode(memoryview(new)[offset:], version=version)
    assert [(n.host, n.port) for n in decoded.node_endpoints] == [("kqp.local", 9093)]
    assert fetch_response_counts(version, memoryview(new)[offset:]) == RecordCounts(120, 3)
    with pytest.raises(ProtocolError):
        rewrite_addresses(1, version, frame[:-2], offset, to_kqp)


def test_produce_response_without_hints_is_not_copied() -> None:
    part = ProduceResponse.TopicProduceResponse.PartitionProduceResponse(index=0, error_code=0, base_offset=5)
    message = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=[part])],
                              throttle_time_ms=0)  # fmt: skip
    frame = response_frame(0, 10, message)
    assert rewrite_addresses(0, 10, frame, response_body_offset(0, 10, frame), to_kqp) == (None, [])


def test_a_chunk_that_is_one_frame_comes_back_whole() -> None:
    reader = FrameReader(1 << 20)
    frame = request(0, 9, body=b"x" * 100).tobytes()
    reader.received(frame)
    got = reader.next_frame()
    assert got is not None and got.obj is frame and got == frame
    assert reader.next_frame() is None and reader.buffered == 0 and not reader.has_partial()
    # then two frames and a half in one chunk, the half completed by the next chunk
    reader.received(frame + frame + frame[:50])
    assert reader.next_frame() == frame and reader.next_frame() == frame
    assert reader.next_frame() is None and reader.has_partial()
    reader.received(frame[50:])
    assert reader.next_frame() == frame and reader.buffered == 0
    assert got == frame  # views handed out earlier stay valid


def test_reader_errors_stay_sticky_on_the_fast_path() -> None:
    reader = FrameReader(10)
    reader.received(struct.pack(">i", 4) + b"abcd")
    assert reader.next_frame() == struct.pack(">i", 4) + b"abcd"
    with pytest.raises(FrameTooLarge):  # checked as soon as the prefix is in
        reader.received(struct.pack(">i", 11))
    for _ in range(2):
        with pytest.raises(FrameTooLarge):
            reader.next_frame()
    with pytest.raises(FrameTooLarge):
        reader.received(b"more")


def test_address_walk_counts_fetch_records_on_the_way() -> None:
    """Fetch v16+: the walk to the NodeEndpoints tag hands every records field to `on_records`, so
    the proxy counts records without a second walk; counts must equal the captured truth."""
    import json
    import struct
    from pathlib import Path

    from kqp.protocol.addresses import rewrite_addresses
    from kqp.protocol.records import RecordCounts

    folder = Path(__file__).parent / "bodies"
    fetches = [e for e in json.loads((folder / "manifest.json").read_text()) if e["api"] == "fetch"]
    assert fetches
    for entry in fetches:
        body = (folder / entry["file"]).read_bytes()
        head = struct.pack(">i", 7) + b"\x00"            # response header v1: correlation id, no tags
        frame = memoryview(struct.pack(">i", len(head) + len(body)) + head + body)
        counts = RecordCounts()
        new, seen = rewrite_addresses(1, entry["version"], frame, 4 + len(head),
                                      lambda node, host, port: (host, port), counts.add_from)
        assert new is None and seen == []
        assert (counts.records, counts.batches) == (entry["records"], entry["batches"]), entry["file"]
