"""FrameDecoder: whole, byte by byte, two at once, trailing partials, size boundaries, fuzzing."""

from __future__ import annotations

import itertools
import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqp.protocol.errors import FrameTooLarge, ProtocolError
from kqp.protocol.frames import FrameDecoder


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def drain(decoder: FrameDecoder) -> list[bytes]:
    out = []
    for _ in range(10_000):  # bounded: a decoder bug must not hang the suite
        f = decoder.next_frame()
        if f is None:
            return out
        out.append(bytes(f))
    raise AssertionError("decoder never returned None")


A = frame(b"hello")
B = frame(b"world!!")


def test_whole_frame_is_a_zero_copy_view_of_the_fed_bytes() -> None:
    data = A
    d = FrameDecoder(100)
    d.feed(data)
    f = d.next_frame()
    assert f is not None and bytes(f) == A
    assert f.obj is data  # a view over the very object the transport gave us
    assert d.next_frame() is None
    assert d.buffered == 0 and not d.has_partial()


def test_byte_by_byte() -> None:
    d = FrameDecoder(100)
    got = []
    for i, b in enumerate(A + B):
        d.feed(bytes([b]))
        got += drain(d)
        if i < len(A) - 1:
            assert got == [] and d.has_partial()
    assert got == [A, B]
    assert not d.has_partial()


def test_a_frame_trickled_a_byte_at_a_time_costs_about_its_size() -> None:
    # A slowloris client: 64 KiB of body, one byte per read. A bytes object per byte would hold
    # 64 Ki x ~41 bytes (object header + deque slot) = ~2.6 MiB; coalesced, the decoder holds
    # about the frame itself (bytearray growth adds at most an eighth).
    body = bytes(range(256)) * 256
    whole = frame(body)
    d = FrameDecoder(1 << 20)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(len(whole) - 1):
            d.feed(whole[i:i + 1])
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 2 * len(whole), f"{held} bytes held for a {len(whole)}-byte partial frame"
    assert d.next_frame() is None and d.has_partial()
    d.feed(whole[-1:] + A)
    assert drain(d) == [whole, A]


def test_two_frames_in_one_chunk() -> None:
    d = FrameDecoder(100)
    d.feed(A + B)
    assert drain(d) == [A, B]


def test_trailing_partial_frame_is_held() -> None:
    d = FrameDecoder(100)
    d.feed(A + B[:3])  # not even the whole size prefix of B
    assert drain(d) == [A]
    assert d.has_partial() and d.buffered == 3
    d.feed(B[3:6])
    assert drain(d) == [] and d.buffered == 6
    d.feed(B[6:])
    assert drain(d) == [B]
    assert d.buffered == 0


def test_frame_spanning_chunks_is_joined_once() -> None:
    d = FrameDecoder(100)
    d.feed(A[:2])
    d.feed(A[2:7])
    d.feed(A[7:] + B[:1])
    assert drain(d) == [A]
    d.feed(B[1:])
    assert drain(d) == [B]


def test_returned_views_stay_valid_after_more_feeding() -> None:
    d = FrameDecoder(100)
    d.feed(A + B[:5])
    first = d.next_frame()
    d.feed(B[5:])
    second = d.next_frame()
    assert bytes(first) == A and bytes(second) == B


def test_empty_payload_frame_and_empty_feed() -> None:
    d = FrameDecoder(0)
    d.feed(b"")
    assert d.next_frame() is None
    d.feed(frame(b""))
    assert drain(d) == [b"\x00\x00\x00\x00"]


MAX = 16


@pytest.mark.parametrize("size", [MAX - 1, MAX])
def test_sizes_up_to_the_limit_pass(size: int) -> None:
    d = FrameDecoder(MAX)
    d.feed(frame(b"x" * size))
    assert drain(d) == [frame(b"x" * size)]


def test_one_above_the_limit_raises_as_soon_as_the_prefix_is_in() -> None:
    d = FrameDecoder(MAX)
    d.feed(struct.pack(">i", MAX + 1)[:3])  # prefix incomplete: nothing to judge yet
    assert d.next_frame() is None
    with pytest.raises(FrameTooLarge):
        d.feed(struct.pack(">i", MAX + 1)[3:])  # the body never needs to arrive
    with pytest.raises(FrameTooLarge):  # sticky: the stream cannot be resynchronised
        d.next_frame()


def test_oversized_second_frame_still_delivers_the_first() -> None:
    d = FrameDecoder(MAX)
    d.feed(frame(b"ok") + struct.pack(">i", 1 << 30))
    assert bytes(d.next_frame()) == frame(b"ok")
    with pytest.raises(FrameTooLarge):
        d.next_frame()


def test_negative_size_is_a_protocol_error_not_too_large() -> None:
    d = FrameDecoder(MAX)
    with pytest.raises(ProtocolError) as info:
        d.feed(struct.pack(">i", -1))
    assert not isinstance(info.value, FrameTooLarge)


def test_one_byte_short_is_not_delivered() -> None:
    d = FrameDecoder(MAX)
    d.feed(frame(b"x" * MAX)[:-1])
    assert d.next_frame() is None and d.has_partial()
    d.feed(b"x")
    assert drain(d) == [frame(b"x" * MAX)]


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=40), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_any_chunking_yields_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(p) for p in payloads)
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    d = FrameDecoder(64)
    got = []
    for a, b in itertools.pairwise(points):
        d.feed(stream[a:b])
        got += drain(d)
    assert got == [frame(p) for p in payloads]
    assert d.buffered == 0


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=30), max_size=10), limit=st.integers(min_value=0, max_value=32))
def test_garbage_raises_only_protocol_errors(chunks: list[bytes], limit: int) -> None:
    d = FrameDecoder(limit)
    try:
        for c in chunks:
            d.feed(c)
            for f in drain(d):
                assert len(f) - 4 == struct.unpack(">i", f[:4])[0] <= limit
    except ProtocolError:
        pass


def test_next_frame_parts_forwards_a_split_frame_without_joining_it() -> None:
    import struct

    from kqp.protocol.frames import FrameDecoder

    body = bytes(range(200)) * 50
    frame = struct.pack(">i", len(body)) + body
    two = frame + frame
    for cut in (1, 3, 4, 5, 100, len(frame) - 1, len(frame), len(frame) + 7):
        decoder = FrameDecoder(1 << 20)
        decoder.feed(two[:cut])
        decoder.feed(two[cut:])
        got = [decoder.next_frame_parts(64), decoder.next_frame_parts(64)]
        assert decoder.next_frame_parts(64) is None and decoder.buffered == 0
        for head, parts in got:
            assert b"".join(parts) == frame                  # the parts are the frame, in order
            assert bytes(head) == frame[: len(head)] and len(head) >= 64   # the head is its start


def test_next_frame_parts_copies_the_head_only_when_the_first_part_is_short() -> None:
    import struct

    from kqp.protocol.frames import FrameDecoder

    body = bytes(range(256)) * 400  # 100 KB
    frame = struct.pack(">i", len(body)) + body
    decoder = FrameDecoder(1 << 20)
    decoder.feed(b"\x00\x00\x00\x02ab" + frame[:10])  # a small frame, then a read's last 10 bytes
    decoder.feed(frame[10:60_000])
    decoder.feed(frame[60_000:])
    assert decoder.next_frame_parts(64) is not None
    head, parts = decoder.next_frame_parts(1024)
    assert bytes(head) == frame[:1024] and len(head.obj) == 1024  # a copy of the head, not of the frame
    assert [len(p) for p in parts] == [10, 59_990, len(frame) - 60_000]


def test_next_frame_parts_waits_for_the_whole_frame() -> None:
    import struct

    from kqp.protocol.frames import FrameDecoder

    frame = struct.pack(">i", 10) + b"0123456789"
    decoder = FrameDecoder(100)
    decoder.feed(frame[:9])
    assert decoder.next_frame_parts(8) is None
    decoder.feed(frame[9:])
    head, parts = decoder.next_frame_parts(8)
    assert len(head) >= 8 and bytes(head) == frame[: len(head)]
    assert [bytes(p) for p in parts] == [frame[:9], frame[9:]]


def test_next_frame_parts_hands_a_read_it_covers_whole_over_as_it_is() -> None:
    import struct

    from kqp.protocol.frames import FrameDecoder

    # Three frames of 10,244 bytes over five reads: reads a frame covers whole go out as the
    # received objects (no view made per read of a large frame), the cut ones as views.
    body = bytes(range(256)) * 40
    frame = struct.pack(">i", len(body)) + body
    stream = frame * 3
    cuts = (2000, 8000, 12000, 14000, len(stream))
    reads = [stream[a:b] for a, b in zip((0, *cuts[:-1]), cuts, strict=True)]
    decoder = FrameDecoder(1 << 20)
    for data in reads:
        decoder.feed(data)
    (head1, parts1), (head2, parts2), (head3, parts3) = (decoder.next_frame_parts(16) for _ in range(3))
    assert parts1[0] is reads[0] and parts1[1] is reads[1] and len(parts1) == 3   # then read 2 up to 10,244
    assert parts2[1] is reads[3] and len(parts2) == 3   # read 2's end, read 3 itself, read 4 up to the cut
    assert all(isinstance(part, memoryview) for part in (parts1[2], parts2[0], parts2[2], *parts3))
    assert [b"".join(parts) for parts in (parts1, parts2, parts3)] == [frame] * 3
    assert all(isinstance(head, memoryview) and bytes(head) == frame[: len(head)]
               for head in (head1, head2, head3))
    assert decoder.next_frame_parts(16) is None and decoder.buffered == 0
