"""A response read as it arrives: the stream walk and the tag section rewritten at its own size.

A large Fetch response passes on to the client as its reads come in (proxy/connection/streaming.py).
The stream walk follows its structure read by read to the top-level tag section, where Fetch v16+
carries NodeEndpoints; it must end where the split-frame walk ends on the whole frame, whatever the
cuts, never claim a byte of the tag section before it gets there, and fail alike on a truncated frame.
The tag section, once whole, is rewritten at its own size (the length went out first): kafka-python
must read the result with every endpoint kqp's, or, when they do not fit, none.
"""

from __future__ import annotations

import pytest
from codec_support import response_frame, sample_message
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceResponse
from test_bodies_parts import (
    CASES,
    HYPOTHESIS,
    RECORDS,
    byte_by_byte,
    counted,
    cut,
    fetch_frame,
    random_cuts,
    to_kqp,
)

from kqp.protocol.addresses import FILLER_TAG, _filler, may_carry_addresses, rewrite_tail_same_size
from kqp.protocol.apis import ApiKey, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.fetch import fetch_response_counts_parts, fetch_stream_walk
from kqp.protocol.headers import response_body_offset
from kqp.protocol.parts import SplitFrame, StreamFrame
from kqp.protocol.records import BodyError, RecordCounts
from kqp.protocol.walker import read_tagged_fields, walker_for, write_uvarint

FETCH, PRODUCE = ApiKey.Fetch, ApiKey.Produce


def stream_walk(walker_walk, parts: tuple[memoryview, ...], total: int, pos: int,
                sink: RecordCounts | None = None) -> tuple[int, list[int]]:
    """Feed `parts` one by one to a stream walk; where it ended, and where it waited after each part."""
    frame = StreamFrame(parts[:1], total)
    walk = walker_walk(frame, pos, sink)
    waits = []
    for part in (None, *parts[1:]):
        if part is not None:
            frame.add(part)
        try:
            next(walk)
        except StopIteration as done:
            return done.value, waits
        waits.append(frame.waiting)
    next(walk)   # every byte is in: it ends, or raises
    raise AssertionError("a walk over the whole frame neither ended nor raised")


@pytest.mark.parametrize(("api_key", "side", "version"), CASES)
def test_stream_walks_end_where_split_walks_end(api_key: int, side: int, version: int) -> None:
    cls = message_classes(api_key)[side]
    walker = walker_for(cls, version)
    walk = walker.tags_stream()
    body = bytes(sample_message(cls, version).encode(version=version))
    data = b"\x00" * 7 + body
    tags_at = walker.tagged_start_parts(SplitFrame(cut(data, [])), 7)
    for parts in [cut(data, []), byte_by_byte(data), *random_cuts(data, seed=version)]:
        end, waits = stream_walk(walk, parts, len(data), 7)
        assert end == tags_at
        # While it waits, nothing from where it waits on is passed on: never a byte of the tag section.
        assert all(7 <= w <= tags_at for w in waits)
    for stop in range(8, tags_at, max(1, len(body) // 10)):   # cut before its tags: fails as the split walk
        short = data[:stop]
        with pytest.raises(BodyError):
            walker.tagged_start_parts(SplitFrame(cut(short, [])), 7)
        with pytest.raises(BodyError):
            stream_walk(walk, byte_by_byte(short), len(short), 7)


@HYPOTHESIS
@given(data=st.data())
def test_fetch_stream_walk_at_random_cuts(data: st.DataObject) -> None:
    version = data.draw(st.sampled_from([16, 17]))
    frame, body_offset = fetch_frame(version)
    offsets = data.draw(st.lists(st.integers(body_offset + 1, len(frame) - 1), max_size=20))
    parts = cut(frame, [body_offset + 1, *offsets])   # the start holds the header, as the core asks
    walk = fetch_stream_walk(version)
    counts = RecordCounts()
    end, waits = stream_walk(walk, parts, len(frame), body_offset, counts)
    assert end == walker_for(FetchResponse, version).tagged_start_parts(SplitFrame(parts), body_offset)
    assert frame[end] != 0   # the sample carries NodeEndpoints: the section is not empty
    assert all(w <= end for w in waits)
    assert counts == fetch_response_counts_parts(version, parts, body_offset)   # counted as it passed


@pytest.mark.parametrize("name", list(RECORDS))
def test_records_counted_as_they_arrive_equal_counts_of_the_whole(name: str) -> None:
    data = b"\x00" * 5 + RECORDS[name]
    whole = counted(data, 5)
    for parts in [cut(data, []), byte_by_byte(data), *random_cuts(data, seed=len(name))]:
        frame = StreamFrame(parts[:1], len(data))
        counts = RecordCounts()
        steps = counts.add_streamed(frame, 5, len(data))
        for part in (None, *parts[1:]):
            if part is not None:
                frame.add(part)
            if next(steps, "done") == "done":
                break
            assert 5 <= frame.waiting < len(data)   # at a batch header of the field
        assert (counts if isinstance(whole, RecordCounts) else type(counts)) == whole


def test_the_endpoints_of_fetch_and_produce_from_kip_951_are_in_the_tag_section_only() -> None:
    # The stream walk finds a streamed response's addresses at its end: none may be elsewhere.
    for api, first in [(FETCH, 16), (PRODUCE, 10)]:
        cls = message_classes(api)[1]
        assert not may_carry_addresses(api, first - 1) and may_carry_addresses(api, first)
        for version in range(first, cls.valid_versions[1] + 1):
            walker = walker_for(cls, version)
            assert not any("Endpoint" in name or "Broker" in name for name in walker.names)


# --- the tag section at its own size ------------------------------------------------------------


def tail_of(version: int, host: str = "upstream.example") -> tuple[bytes, int]:
    frame, body_offset = fetch_frame(version)
    if host != "upstream.example":
        frame = frame.replace(b"upstream.example", host.encode()[:16].ljust(16, b"x"))
    start = walker_for(FetchResponse, version).tagged_start_parts(SplitFrame(cut(frame, [])), body_offset)
    return frame, start


def decoded(version: int, frame: bytes) -> FetchResponse:
    body_offset = response_body_offset(FETCH, version, memoryview(frame))
    return FetchResponse.decode(frame[body_offset:], version=version)


@pytest.mark.parametrize("version", [16, 17])
@pytest.mark.parametrize("mapped", [("k", 1), ("kqp.local", 19092), ("kqp-xxxxxxxxxxx1", 9092)])
def test_endpoints_rewritten_at_the_same_size(version: int, mapped: tuple[str, int]) -> None:
    frame, start = tail_of(version)
    tail = memoryview(frame)[start:]
    new, seen = rewrite_tail_same_size(FETCH, version, tail, lambda node, host, port: mapped, lambda: False)
    assert [(b.node_id, b.host, b.port) for b in seen] == [(3, "upstream.example", 9092)]
    assert new is not None and len(new) == len(tail)
    response = decoded(version, frame[:start] + new)
    assert [(e.node_id, e.host, e.port) for e in response.node_endpoints] == [(3, *mapped)]
    assert response.responses == decoded(version, frame).responses   # the partitions, untouched
    entries, _ = read_tagged_fields(new, 0)
    fillers = [tag for tag, _, _ in entries if tag == FILLER_TAG]
    assert len(fillers) == (0 if len(mapped[0]) == len("upstream.example") else 1)


@pytest.mark.parametrize("version", [16, 17])
def test_endpoints_that_do_not_fit_or_have_no_listener_are_left_out(version: int) -> None:
    frame, start = tail_of(version)
    tail = memoryview(frame)[start:]
    longer = ("kqp-" + "x" * 40, 19092)
    for mapper, missing in [(lambda n, h, p: longer, lambda: False), (lambda n, h, p: (h, p), lambda: True)]:
        new, seen = rewrite_tail_same_size(FETCH, version, tail, mapper, missing)
        assert new is not None and len(new) == len(tail) and len(seen) == 1
        response = decoded(version, frame[:start] + new)
        assert response.node_endpoints == []   # the client asks Metadata instead (KIP-951)
        assert response.responses == decoded(version, frame).responses


def test_a_tail_with_no_endpoints_or_unchanged_ones_is_left_as_it_is() -> None:
    frame, body_offset = fetch_frame(16, endpoints=False)
    start = walker_for(FetchResponse, 16).tagged_start_parts(SplitFrame(cut(frame, [])), body_offset)
    assert rewrite_tail_same_size(FETCH, 16, memoryview(frame)[start:], to_kqp, lambda: False) == (None, [])
    frame, start = tail_of(16)
    same = rewrite_tail_same_size(FETCH, 16, memoryview(frame)[start:], lambda n, h, p: (h, p), lambda: False)
    assert same[0] is None and len(same[1]) == 1
    with pytest.raises(ProtocolError):   # a tag section must end the frame
        rewrite_tail_same_size(FETCH, 16, memoryview(frame + b"\x00")[start:], to_kqp, lambda: False)


def test_produce_tail_rewritten_at_the_same_size() -> None:
    message = ProduceResponse(responses=[], throttle_time_ms=0,
                              node_endpoints=[ProduceResponse.NodeEndpoint(node_id=1, host="b1.example", port=9)])
    frame = bytes(response_frame(PRODUCE, 11, message))
    body_offset = response_body_offset(PRODUCE, 11, memoryview(frame))
    start = walker_for(ProduceResponse, 11).tagged_start_parts(SplitFrame(cut(frame, [])), body_offset)
    new, _ = rewrite_tail_same_size(PRODUCE, 11, memoryview(frame)[start:], lambda n, h, p: ("kqp", 1),
                                    lambda: False)
    assert new is not None and len(new) == len(frame) - start
    back = ProduceResponse.decode(frame[body_offset:start] + new, version=11)
    assert [(e.host, e.port) for e in back.node_endpoints] == [("kqp", 1)]


@pytest.mark.parametrize("lowest", [FILLER_TAG, 127, 128, 300])
def test_a_filler_takes_exactly_the_room_left(lowest: int) -> None:
    smallest = len(write_uvarint(lowest)) + 1   # the tag and a zero length
    assert all(_filler(lowest, size) is None for size in range(smallest))
    for size in [*range(smallest, 400), 16_383, 16_384, 16_387, 70_000]:
        filler = _filler(lowest, size)
        assert filler is not None and len(filler) == size, size
        entries, end = read_tagged_fields(write_uvarint(1) + filler, 0)
        assert end == size + 1 and entries[0][0] >= lowest
