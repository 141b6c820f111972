"""The skip walker agrees with kafka-python on every request and response at every version."""

from __future__ import annotations

import pytest
from codec_support import sample_message

from kqp.protocol.apis import kqp_ranges, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.walker import read_uvarint, skip_tagged_fields, walker_for, write_uvarint

CASES = [(k, side, v) for k, (lo, hi) in kqp_ranges().items() for side in (0, 1) for v in range(lo, hi + 1)]


@pytest.mark.parametrize(("api_key", "side", "version"), CASES)
def test_walk_ends_where_the_message_ends(api_key: int, side: int, version: int) -> None:
    cls = message_classes(api_key)[side]
    message = sample_message(cls, version)
    body = memoryview(message.encode(version=version))
    walker = walker_for(cls, version)
    bounds = walker.boundaries(body, 0)
    end = skip_tagged_fields(body, bounds[-1]) if walker.flexible else bounds[-1]
    assert end == len(body)
    assert cls.decode(body, version=version) == message
    # every untagged field starts where re-encoding the fields before it would put it
    assert bounds == sorted(bounds) and len(bounds) == len(walker.names) + 1
    if len(body) > 1:
        with pytest.raises(ProtocolError):
            full = walker.boundaries(body[: bounds[-1] - 1], 0)
            if walker.flexible:
                skip_tagged_fields(body[: bounds[-1] - 1], full[-1])


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**28, 2**32 - 1])
def test_uvarint_round_trip(value: int) -> None:
    encoded = write_uvarint(value)
    assert read_uvarint(encoded + b"\xff", 0) == (value, len(encoded))


def test_overlong_uvarint_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        read_uvarint(b"\xff" * 6, 0)


def test_impossible_array_count_is_rejected_without_looping() -> None:
    from kafka.protocol.metadata import MetadataResponse

    walker = walker_for(MetadataResponse, 1)
    body = b"\x7f\xff\xff\xff"  # brokers: 2**31-1 elements in 0 bytes
    with pytest.raises(ProtocolError):
        walker.boundaries(memoryview(body), 0)


WALKED = [(k, side, v) for k, side, v in CASES if message_classes(k)[side].name in ("ProduceRequest", "FetchResponse")]


@pytest.mark.parametrize(("api_key", "side", "version"), WALKED)
def test_on_records_sees_exactly_the_records_fields(api_key: int, side: int, version: int) -> None:
    cls = message_classes(api_key)[side]
    message = sample_message(cls, version)
    body = memoryview(message.encode(version=version))
    seen: list[bytes] = []
    walker = walker_for(cls, version)
    assert walker.body_end(body, 0, lambda buf, start, end: seen.append(bytes(buf[start:end]))) == len(body)
    decoded = cls.decode(body, version=version)
    groups = decoded.topic_data if side == 0 else decoded.responses
    parts = [p for g in groups for p in (g.partition_data if side == 0 else g.partitions)]
    assert seen == [bytes(p.records) for p in parts] and len(seen) == 4


@pytest.mark.parametrize("size", [0, 1, 126, 127, 128, 16382, 16383, 16384, 2**21 - 2, 2**21 - 1, 2**21])
def test_compact_lengths_at_every_varint_width(size: int) -> None:
    # A records field of size bytes has a compact length of size + 1: one to four varint bytes.
    from kafka.protocol.consumer.fetch import FetchResponse

    data = FetchResponse.FetchableTopicResponse.PartitionData
    blob = bytes(range(256)) * (size // 256) + bytes(size % 256)
    parts = [data(partition_index=i, records=blob) for i in range(2)]
    topic = FetchResponse.FetchableTopicResponse(topic_id=None, partitions=parts)
    body = memoryview(FetchResponse(responses=[topic], error_code=0, session_id=0).encode(version=16))
    seen: list[int] = []
    walker = walker_for("FetchResponse", 16)
    assert walker.tagged_start(body, 0, lambda buf, start, end: seen.append(end - start)) == len(body) - 1
    assert seen == ([size, size] if size else [])


def test_walker_fields_line_up_with_kafka_pythons() -> None:
    from kafka.protocol.schemas import BaseField

    for api_key, side, version in CASES:
        cls = message_classes(api_key)[side]
        ours = [BaseField.underscore_name(n) for n in walker_for(cls, version).names]
        theirs = [f.name for f in cls._struct.untagged_fields(version)]
        # kafka-python renames two fields; the order, which is what offsets depend on, is the same.
        renamed = {"cluster_authorized_operations": "authorized_operations"}
        assert [renamed.get(n, n) for n in ours] == theirs, (cls.name, version)


def test_generated_source_uses_only_the_walkers_own_names() -> None:
    import keyword
    import re

    allowed = {"walk", "buf", "pos", "end", "on_records", "n", "m", "_", "range", "BodyError", "_SHORT",
               "_WHAT", "_I16", "_I32", "_bad_count", "_skip_tags", "_truncated", "_uvarint", "f", "len"}  # fmt: skip
    for api_key, side, version in CASES:
        walker = walker_for(message_classes(api_key)[side], version)
        source = walker.source(0, len(walker.names))
        words = set(re.findall(r"[A-Za-z_]\w*", re.sub(r"'[^']*'", "", source)))
        assert words - allowed - set(keyword.kwlist) == set(), (walker.message, version)


def test_nullable_struct_absent_and_present() -> None:
    from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest as Request

    topics = [Request.TopicRequest(name="t")]
    for cursor in (None, Request.Cursor(topic_name="t", partition_index=3)):
        body = memoryview(Request(topics=topics, response_partition_limit=5, cursor=cursor).encode(version=0))
        assert walker_for(Request, 0).body_end(body, 0) == len(body)
        assert len(body) == (walker_for(Request, 0).boundaries(body, 0)[-1] + 1)


def test_classic_negative_lengths_are_rejected() -> None:
    from kafka.protocol.producer.produce import ProduceRequest

    walker = walker_for(ProduceRequest, 3)
    with pytest.raises(ProtocolError):  # transactional id of length -2
        walker.body_end(memoryview(b"\xff\xfe" + bytes(20)), 0)
    with pytest.raises(ProtocolError):  # topic_data count -2
        walker.body_end(memoryview(b"\xff\xff\x00\x01\x00\x00\x00\x01\xff\xff\xff\xfe"), 0)
