"""Every reader of a split frame against its contiguous twin: the same answers and the same errors.

A frame that spans several reads arrives as parts (views of the transport's chunks) and is read in
place across them (``kqp.protocol.parts``). Whatever the cuts, each reader must give exactly what
its contiguous version gives on the joined frame: cut at every single offset (so inside the size
prefix, every fixed field, every varint, every tag section, every record batch header and every
record), byte by byte, at offsets hypothesis draws, whole, and with trailing bytes; a truncated
frame must fail alike. And it must copy only the few bytes a cut splits, never record data.
"""

from __future__ import annotations

import itertools
import random
import struct
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from codec_support import response_frame, sample_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from kqp.protocol.addresses import may_carry_addresses, rewrite_addresses, rewrite_addresses_parts
from kqp.protocol.apis import ApiKey, kqp_ranges, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.fetch import (
    FETCH_RESPONSE_VERSIONS,
    empty_fetch_response,
    fetch_response_counts,
    fetch_response_counts_parts,
)
from kqp.protocol.headers import response_body_offset
from kqp.protocol.parts import SplitFrame
from kqp.protocol.produce import PRODUCE_VERSIONS, produce_request_counts, produce_request_counts_parts
from kqp.protocol.records import BodyError, RecordCounts
from kqp.protocol.throttle_field import throttle_field_kind, throttle_patch_parts
from kqp.protocol.walker import walker_for

HYPOTHESIS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TRAILING = b"\x00\x01trailing"


# --- cutting frames ------------------------------------------------------------------------------


def cut(data: bytes, offsets: list[int] | tuple[int, ...]) -> tuple[memoryview, ...]:
    """``data`` cut before each offset, as views of one buffer (as reads of one chunk would be)."""
    view = memoryview(data)
    bounds = [0, *sorted(set(o for o in offsets if 0 < o < len(data))), len(data)]
    return tuple(view[a:b] for a, b in itertools.pairwise(bounds) if b > a)


def single_cuts(data: bytes) -> Iterator[tuple[memoryview, ...]]:
    for offset in range(1, len(data)):
        yield cut(data, [offset])


def byte_by_byte(data: bytes) -> tuple[memoryview, ...]:
    return cut(data, range(1, len(data)))


def random_cuts(data: bytes, seed: int, count: int = 5) -> list[tuple[memoryview, ...]]:
    rng = random.Random(seed)
    return [cut(data, rng.sample(range(1, len(data)), min(rng.randint(1, 12), len(data) - 1)))
            for _ in range(count) if len(data) > 1]  # fmt: skip


def cuts_of(data: bytes) -> st.SearchStrategy[tuple[memoryview, ...]]:
    return st.lists(st.integers(1, max(1, len(data) - 1)), max_size=16).map(lambda offsets: cut(data, offsets))


def outcome(call: Callable[[], Any]) -> Any:
    """What a reader answers, or the class of the error it raised (compared across the two paths)."""
    try:
        return call()
    except (BodyError, ProtocolError) as exc:
        return BodyError if isinstance(exc, BodyError) else ProtocolError


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every copy a split-frame reader makes."""
    made: list[int] = []
    original = SplitFrame.copy

    def copy(self: SplitFrame, start: int, stop: int) -> bytes:
        data = original(self, start, stop)
        made.append(len(data))
        return data

    monkeypatch.setattr(SplitFrame, "copy", copy)
    return made


# --- frames to read ------------------------------------------------------------------------------


def batches(magic: int, sizes: list[int], compression: int = 0) -> bytes:
    """Record batches of 1..n records each, values of varied length, so headers land anywhere."""
    out, offset = b"", 0
    for n in sizes:
        builder = MemoryRecordsBuilder(magic, compression, 1 << 20, offset=offset)
        for i in range(n):
            builder.append(1_700_000_000_000 + i, None, b"v" * (i * 7 % 23))
        builder.close()
        out += bytes(builder.buffer())
        offset += n
    return out


def request_frame(api_key: int, version: int, body: bytes, flexible: bool) -> tuple[bytes, int]:
    # Request header v1, or v2 with its tag section (also for versions kqp's header table refuses).
    head = struct.pack(">hhih", api_key, version, 5, 6) + b"client" + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(head) + len(body)) + head + body, 4 + len(head)


def produce_frame(version: int) -> tuple[bytes, int]:
    magic = 2 if version >= 3 else 1
    key = (lambda i: {"topic_id": uuid.UUID(int=i + 1)}) if version >= 13 else (lambda i: {"name": f"t{i}"})
    part = ProduceRequest.TopicProduceData.PartitionProduceData
    topics = [ProduceRequest.TopicProduceData(partition_data=[
        part(index=0, records=batches(magic, [3, 1])), part(index=1, records=None),
        part(index=2, records=batches(magic, [2], compression=1))], **key(i)) for i in range(2)]  # fmt: skip
    body = ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=1, topic_data=topics).encode(version=version)
    return request_frame(ApiKey.Produce, version, bytes(body), flexible=version >= 9)


def fetch_frame(version: int, endpoints: bool = True) -> tuple[bytes, int]:
    magic = 2 if version >= 4 else 1
    data = FetchResponse.FetchableTopicResponse.PartitionData
    partitions = [
        data(partition_index=0, error_code=0, high_watermark=9, records=batches(magic, [2, 3]),
             aborted_transactions=[data.AbortedTransaction(producer_id=1, first_offset=2)],
             current_leader=data.LeaderIdAndEpoch(leader_id=1, leader_epoch=1)),
        data(partition_index=1, error_code=6, high_watermark=-1, records=None),
        # cut at max bytes: a partial trailing batch
        data(partition_index=2, error_code=0, high_watermark=9, records=batches(magic, [1, 4])[:-30]),
    ]  # fmt: skip
    topic = FetchResponse.FetchableTopicResponse(partitions=partitions, topic="t", topic_id=uuid.UUID(int=7))
    extra = {}
    if endpoints:
        extra["node_endpoints"] = [FetchResponse.NodeEndpoint(node_id=3, host="upstream.example", port=9092)]
    message = FetchResponse(throttle_time_ms=0, error_code=0, session_id=77, responses=[topic, topic], **extra)
    frame = response_frame(ApiKey.Fetch, version, message)
    return bytes(frame), response_body_offset(ApiKey.Fetch, version, frame)


def to_kqp(node_id: int, host: str, port: int) -> tuple[str, int]:
    return "kqp.local", port + 10_000


# --- SplitFrame ----------------------------------------------------------------------------------


@HYPOTHESIS
@given(data=st.binary(min_size=1, max_size=80), offsets=st.lists(st.integers(1, 79), max_size=10),
       start=st.integers(0, 90), size=st.integers(0, 20))  # fmt: skip
def test_split_frame_addresses_the_joined_bytes(data: bytes, offsets: list[int], start: int, size: int) -> None:
    frame = SplitFrame(cut(data, offsets))
    assert len(frame) == len(data)
    part, base = frame.at(start)
    assert bytes(part[start - base : start - base + 1]) == data[start : start + 1]
    buf, base = frame.window(start, size)
    assert bytes(buf[start - base : start - base + size]) == data[start : start + size]
    views = frame.views(start, start + size)
    assert b"".join(views) == data[start : start + size] == frame.copy(start, start + size)
    assert all(view.obj is data for view in views)  # views of the parts, never copies


def test_window_copies_only_when_a_cut_splits_the_bytes() -> None:
    data = bytes(range(20))
    frame = SplitFrame(cut(data, [8, 9, 14]))
    assert frame.window(2, 6) == (frame.parts[0], 0)  # inside the first part: the part itself
    assert frame.window(6, 4) == (data[6:10], 6)  # across two cuts: a copy of those 4 bytes only
    assert frame.window(18, 10) == (frame.parts[3], 14)  # the frame's end is as far as it goes
    assert frame.at(20) == (b"", 20) and frame.window(25, 4)[0] == b""


# --- the schema walker ---------------------------------------------------------------------------

CASES = [(k, side, v) for k, (lo, hi) in kqp_ranges().items() for side in (0, 1) for v in range(lo, hi + 1)]


@pytest.mark.parametrize(("api_key", "side", "version"), CASES)
def test_walks_over_parts_end_where_contiguous_walks_end(api_key: int, side: int, version: int) -> None:
    cls = message_classes(api_key)[side]
    walker = walker_for(cls, version)
    body = bytes(sample_message(cls, version).encode(version=version))
    for data in (b"\x00" * 7 + body, b"\x00" * 7 + body + TRAILING):
        bounds = walker.boundaries(memoryview(data), 7)
        end = walker.body_end(memoryview(data), 7)
        for parts in [cut(data, []), byte_by_byte(data), *random_cuts(data, seed=version)]:
            frame = SplitFrame(parts)
            assert walker.body_end_parts(frame, 7) == end
            assert walker.tagged_start_parts(frame, 7) == bounds[-1]
            assert [walker.prefix_parts(i)(frame, 7) for i in range(len(bounds))] == bounds
    for stop in range(7, len(body) + 7, max(1, len(body) // 10)):  # truncated: both fail
        short = (b"\x00" * 7 + body)[:stop]
        with pytest.raises(BodyError):
            walker.body_end(memoryview(short), 7)
        with pytest.raises(BodyError):
            walker.body_end_parts(SplitFrame(byte_by_byte(short)), 7)


def test_split_walk_source_uses_only_the_walkers_own_names() -> None:
    import keyword
    import re

    allowed = {"walk", "frame", "buf", "base", "pos", "lim", "end", "sink", "add", "add_parts", "n", "m", "_",
               "range", "len", "at", "total", "add_from", "add_from_parts", "BodyError", "_SHORT", "_WHAT",
               "_I16", "_I32", "_bad_count", "_refill", "_skip_tags_in", "_truncated", "_uvarint", "f"}  # fmt: skip
    for api_key, side, version in CASES:
        walker = walker_for(message_classes(api_key)[side], version)
        source = walker.source(0, len(walker.names), parts=True)
        words = set(re.findall(r"[A-Za-z_]\w*", re.sub(r"'[^']*'", "", source)))
        assert words - allowed - set(keyword.kwlist) == set(), (walker.message, version)


# --- record counts -------------------------------------------------------------------------------

RECORDS = {
    "magic2": batches(2, [1, 5, 2, 9]),
    "magic2-gzip": batches(2, [4], compression=1) + batches(2, [3]),
    "magic1": batches(1, [1, 1, 1]),
    "magic0-gzip": batches(0, [3], compression=1) + batches(0, [1]),
    "partial-trailing": batches(2, [3, 2])[:-20],
    "short-trailing": batches(2, [3]) + b"\x00" * 16,
}


def counted(data: bytes, start: int = 0) -> RecordCounts | type:
    counts = RecordCounts()
    return outcome(lambda: (counts.add_from(memoryview(data), start, len(data)), counts)[1])


def counted_parts(parts: tuple[memoryview, ...], start: int = 0) -> RecordCounts | type:
    counts = RecordCounts()
    frame = SplitFrame(parts)
    return outcome(lambda: (counts.add_from_parts(frame, start, frame.total), counts)[1])


@pytest.mark.parametrize("name", list(RECORDS))
def test_record_counts_over_parts_equal_counts_over_the_joined_bytes(name: str, copies: list[int]) -> None:
    data = b"\xee" * 5 + RECORDS[name]  # the records field starts inside the frame, not at 0
    expected = counted(data, 5)
    assert isinstance(expected, RecordCounts) and expected.batches > 0
    for parts in [cut(data, []), byte_by_byte(data), *single_cuts(data)]:
        assert counted_parts(parts, 5) == expected
    assert max(copies) <= 61  # a batch header at most: records are never copied


def corrupt(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


@pytest.mark.parametrize("damage", [
    (8, struct.pack(">i", 13)),  # size below any legal message
    (8, struct.pack(">i", 40)),  # legal for magic 0, too small for a magic 2 header
    (16, b"\x03"),  # unknown magic
    (57, struct.pack(">i", -1)),  # negative record count
], ids=["size", "v2-size", "magic", "count"])  # fmt: skip
@pytest.mark.parametrize("batch", [0, 1])
def test_corrupt_batches_fail_alike_wherever_the_cuts_are(damage: tuple[int, bytes], batch: int) -> None:
    good = RECORDS["magic2"]
    offset = 0 if batch == 0 else len(batches(2, [1]))
    data = corrupt(good, offset + damage[0], damage[1])
    expected = counted(data)
    assert expected is BodyError or damage == (8, struct.pack(">i", 40))  # a magic 0 size: the data then breaks
    for parts in [byte_by_byte(data), *single_cuts(data)]:
        assert counted_parts(parts) == expected


@HYPOTHESIS
@given(data=st.data())
def test_record_counts_at_random_cuts(data: st.DataObject) -> None:
    records = data.draw(st.sampled_from(list(RECORDS.values())))
    stop = data.draw(st.integers(0, len(records)))  # any truncation: a partial trailing batch
    records = records[:stop]
    parts = data.draw(cuts_of(records)) if records else (memoryview(records),)
    assert counted_parts(parts) == counted(records)


# --- Produce requests and Fetch responses --------------------------------------------------------


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_counts_over_parts(version: int, copies: list[int]) -> None:
    frame, offset = produce_frame(version)
    expected = produce_request_counts(version, memoryview(frame)[offset:])
    assert expected.records > 0
    for data in (frame, frame + TRAILING):  # bytes after a whole body are not read
        for parts in [cut(data, []), byte_by_byte(data), *single_cuts(data)]:
            assert produce_request_counts_parts(version, parts, offset) == expected
    assert max(copies) <= 61
    for stop in range(offset, len(frame)):  # truncated anywhere: a BodyError, as contiguous
        with pytest.raises(BodyError):
            produce_request_counts(version, memoryview(frame)[offset:stop])
        with pytest.raises(BodyError):
            produce_request_counts_parts(version, cut(frame[:stop], [stop - 3, stop - 1]), offset)


@pytest.mark.parametrize("version", FETCH_RESPONSE_VERSIONS)
def test_fetch_counts_over_parts(version: int, copies: list[int]) -> None:
    frame, offset = fetch_frame(version)
    expected = fetch_response_counts(version, memoryview(frame)[offset:])
    assert expected.records > 0
    for data in (frame, frame + TRAILING):
        for parts in [cut(data, []), byte_by_byte(data), *single_cuts(data)]:
            assert fetch_response_counts_parts(version, parts, offset) == expected
    assert max(copies) <= 61
    for stop in range(offset, len(frame)):
        with pytest.raises(BodyError):
            fetch_response_counts_parts(version, cut(frame[:stop], [stop - 3, stop - 1]), offset)


@HYPOTHESIS
@given(data=st.data())
def test_produce_and_fetch_counts_at_random_cuts(data: st.DataObject) -> None:
    if data.draw(st.booleans()):
        version = data.draw(st.sampled_from(PRODUCE_VERSIONS))
        frame, offset = produce_frame(version)
        contiguous, split = produce_request_counts, produce_request_counts_parts
    else:
        version = data.draw(st.sampled_from(FETCH_RESPONSE_VERSIONS))
        frame, offset = fetch_frame(version)
        contiguous, split = fetch_response_counts, fetch_response_counts_parts
    frame = frame[: data.draw(st.integers(offset, len(frame)))] + data.draw(st.sampled_from([b"", TRAILING]))
    parts = data.draw(cuts_of(frame))
    expected = outcome(lambda: contiguous(version, memoryview(frame)[offset:]))
    assert outcome(lambda: split(version, parts, offset)) == expected


def test_one_part_is_read_as_it_always_was() -> None:
    frame, offset = fetch_frame(16)
    view = memoryview(frame)
    assert fetch_response_counts_parts(16, (view,), offset) == fetch_response_counts(16, view[offset:])
    assert fetch_response_counts_parts(16, (frame,), offset) == fetch_response_counts(16, view[offset:])  # bytes too


# --- broker addresses ----------------------------------------------------------------------------

TAGGED = [(ApiKey.Produce, v) for v in PRODUCE_VERSIONS if v >= 10] + \
         [(ApiKey.Fetch, v) for v in FETCH_RESPONSE_VERSIONS if v >= 16]  # fmt: skip


def produce_response_frame(version: int, endpoints: bool) -> tuple[bytes, int]:
    part = ProduceResponse.TopicProduceResponse.PartitionProduceResponse(index=0, error_code=6, base_offset=-1)
    topic = ProduceResponse.TopicProduceResponse(name="t", topic_id=uuid.UUID(int=2), partition_responses=[part])
    extra = {}
    if endpoints:
        extra["node_endpoints"] = [ProduceResponse.NodeEndpoint(node_id=2, host="upstream.example", port=9093)]
    frame = response_frame(ApiKey.Produce, version, ProduceResponse(responses=[topic], throttle_time_ms=0, **extra))
    return bytes(frame), response_body_offset(ApiKey.Produce, version, frame)


def rewritten(api_key: int, version: int, parts: tuple[memoryview, ...], offset: int) -> Any:
    counts = RecordCounts()
    found = outcome(lambda: rewrite_addresses_parts(api_key, version, parts, offset, to_kqp, counts))
    if not isinstance(found, tuple):
        return found
    new, seen = found
    return (None if new is None else b"".join(new)), seen, counts if api_key == ApiKey.Fetch else None


@pytest.mark.parametrize(("api_key", "version"), TAGGED)
@pytest.mark.parametrize("endpoints", [False, True], ids=["no-hints", "node-endpoints"])
def test_node_endpoints_over_parts(api_key: int, version: int, endpoints: bool, copies: list[int]) -> None:
    build = fetch_frame if api_key == ApiKey.Fetch else produce_response_frame
    frame, offset = build(version, endpoints)
    counts = RecordCounts()
    new, seen = rewrite_addresses(api_key, version, memoryview(frame), offset, to_kqp, counts.add_from)
    assert (new is not None) == endpoints and len(seen) == endpoints
    expected = (new, seen, counts if api_key == ApiKey.Fetch else None)
    for parts in [cut(frame, []), byte_by_byte(frame), *single_cuts(frame)]:
        assert rewritten(api_key, version, parts, offset) == expected
    # Copies: the few bytes a cut splits, and with hints the tag section (which ends the frame).
    section = len(frame) - walker_for(message_classes(api_key)[1], version).tagged_start(memoryview(frame), offset)
    assert max(copies) <= max(61, section) and (section < 100 or not endpoints)
    for stop in range(offset, len(frame)):  # truncated: the same error as contiguous
        short = frame[:stop]
        error = outcome(lambda s=short: rewrite_addresses(api_key, version, memoryview(s), offset, to_kqp))
        assert error in (BodyError, ProtocolError)
        assert rewritten(api_key, version, cut(short, [stop - 2]), offset) is error


def test_rewritten_fetch_response_is_views_of_the_original_around_the_new_section() -> None:
    frame, offset = fetch_frame(16)
    parts = cut(frame, [100, 300, 301, 700])
    new, seen = rewrite_addresses_parts(ApiKey.Fetch, 16, parts, offset, to_kqp)
    assert new is not None and [(b.node_id, b.host, b.port) for b in seen] == [(3, "upstream.example", 9092)]
    joined = b"".join(new)
    assert struct.unpack_from(">i", joined)[0] == len(joined) - 4
    decoded = FetchResponse.decode(joined[offset:], version=16)
    assert [(n.host, n.port) for n in decoded.node_endpoints] == [("kqp.local", 19092)]
    copied = sum(len(p) for p in new if not (isinstance(p, memoryview) and p.obj is frame))
    assert copied < 60  # the size prefix and the re-encoded section: the partitions are the original views


ADDRESSED = [(k, v) for k, (lo, hi) in kqp_ranges().items() for v in range(lo, hi + 1)
             if may_carry_addresses(k, v) and (k, v) not in TAGGED]  # fmt: skip


@pytest.mark.parametrize(("api_key", "version"), ADDRESSED)
def test_other_addressed_responses_over_parts(api_key: int, version: int) -> None:
    # Metadata, FindCoordinator, DescribeCluster, DescribeQuorum: joined when split, same answer.
    frame = response_frame(api_key, version, sample_message(message_classes(api_key)[1], version))
    offset = response_body_offset(api_key, version, frame)
    new, seen = rewrite_addresses(api_key, version, frame, offset, to_kqp)
    assert new is not None and seen
    for parts in [byte_by_byte(bytes(frame)), *random_cuts(bytes(frame), seed=version)]:
        assert rewritten(api_key, version, parts, offset)[:2] == (new, seen)


# --- throttle_time_ms and the empty Fetch answer -------------------------------------------------

THROTTLED = [(k, v) for k, (lo, hi) in kqp_ranges().items() for v in range(lo, hi + 1)
             if throttle_field_kind(k, v) != "none"]  # fmt: skip


@pytest.mark.parametrize(("api_key", "version"), THROTTLED)
def test_throttle_patch_over_parts(api_key: int, version: int) -> None:
    frame = bytes(response_frame(api_key, version, sample_message(message_classes(api_key)[1], version)))
    offset = response_body_offset(api_key, version, memoryview(frame))
    whole, upstream = throttle_patch_parts(api_key, version, (memoryview(frame),), offset, 5000)
    assert whole is not None and upstream == 100
    expected = b"".join(whole)
    at = expected.index(struct.pack(">i", 5000))  # where the field is (its value is 100 before)
    near = [cut(frame, [c]) for c in range(max(1, at - 6), min(len(frame), at + 10))]  # cuts in and around it
    for parts in [byte_by_byte(frame), *near, *random_cuts(frame, seed=version, count=2)]:
        new, upstream = throttle_patch_parts(api_key, version, parts, offset, 5000)
        assert new is not None and b"".join(new) == expected and upstream == 100
        assert sum(len(p) for p in new if not isinstance(p, memoryview)) == 4  # the field, nothing else
        assert throttle_patch_parts(api_key, version, parts, offset, 100) == (None, 100)
    for stop in (offset, at + 3):
        with pytest.raises(ProtocolError):
            throttle_patch_parts(api_key, version, byte_by_byte(frame[:stop]), offset, 5000)


@pytest.mark.parametrize("version", FETCH_RESPONSE_VERSIONS)
def test_empty_fetch_response_over_parts(version: int) -> None:
    frame, offset = fetch_frame(version)
    expected = empty_fetch_response(version, (memoryview(frame),), offset, 1500)
    for parts in [byte_by_byte(frame), *(cut(frame, [c]) for c in range(1, offset + 12))]:
        assert empty_fetch_response(version, parts, offset, 1500) == expected
    if version >= 7:  # the session id is read across the cuts
        assert FetchResponse.decode(expected[offset:], version=version).session_id == 77
    for stop in range(1, offset + (10 if version >= 7 else 0)):
        with pytest.raises(BodyError):
            empty_fetch_response(version, byte_by_byte(frame[:stop]), offset, 1500)
