"""`FrameReader` and `ReadArena`: a byte stream in, read in place or fed, whole frames out.

Every stream is fed whole, byte by byte, two frames at once and with trailing partials; read as a
buffered transport reads it (`get_buffer`, fill, `received(nbytes)`) with the reads cut everywhere; at the size
boundaries (max-1, max, max+1, one short); and at random (hypothesis), in either input mode and both
mixed, with frames taken or left waiting and `own()` called between reads: the frames out must be
exactly the frames in, the views handed out must never change, and a bad size prefix anywhere must
raise one sticky error once every frame before it was handed out.
"""

from __future__ import annotations

import itertools
import struct
import tracemalloc
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqp.protocol.errors import FrameTooLarge, ProtocolError
from kqp.protocol.frames import FIRST_SEGMENT, LARGE_FRAME, LAST_SEGMENT, FrameReader, ReadArena

BIG = 8 * 1024 * 1024


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def sized(size: int, fill: int = 7) -> bytes:
    return frame(bytes([fill % 256]) * size)


def drain(reader: FrameReader) -> list[bytes]:
    out = []
    for _ in range(10_000):  # bounded: a reader bug must not hang the suite
        f = reader.next_frame()
        if f is None:
            return out
        out.append(bytes(f))
    raise AssertionError("reader never returned None")


def read_in_place(reader: FrameReader, data: bytes, reads: list[int], own: bool = True) -> list[tuple]:
    """`data` read as a buffered transport reads it, in reads of the sizes listed (cycled), each at
    most what `get_buffer` offers; after each, the whole frames taken (`next_frame_parts`) and what
    is left owned, as the connection core does. The parts of every frame, in order."""
    out, pos, i = [], 0, 0
    while pos < len(data):
        buf = reader.get_buffer(65536)
        n = min(len(buf), reads[i % len(reads)], len(data) - pos)
        buf[:n] = data[pos:pos + n]
        del buf   # released before `received`, as a transport releases it
        pos, i = pos + n, i + 1
        reader.received(n)
        while (got := reader.next_frame_parts(64)) is not None:
            out.append(got[1])
        if own:
            reader.own()
    return out


def joined(frames: list[tuple]) -> list[bytes]:
    return [b"".join(parts) for parts in frames]


A = frame(b"hello")
B = frame(b"world!!")


# -- fed -----------------------------------------------------------------------------------------
def test_whole_frame_is_a_zero_copy_view_of_the_fed_bytes() -> None:
    data = A
    d = FrameReader(100)
    d.received(data)
    f = d.next_frame()
    assert f is not None and bytes(f) == A
    assert f.obj is data  # a view over the very object the transport gave us
    assert d.next_frame() is None
    assert d.buffered == 0 and not d.has_partial()


def test_byte_by_byte() -> None:
    d = FrameReader(100)
    got = []
    for i, b in enumerate(A + B):
        d.received(bytes([b]))
        got += drain(d)
        if i < len(A) - 1:
            assert got == [] and d.has_partial()
    assert got == [A, B]
    assert not d.has_partial()


def test_a_frame_trickled_a_byte_at_a_time_costs_about_its_size() -> None:
    # A slowloris client: 64 KiB of body, one byte per read. A bytes object per byte would hold
    # 64 Ki x ~41 bytes (object header + deque slot) = ~2.6 MiB; coalesced, the reader holds
    # about the frame itself (bytearray growth adds at most an eighth).
    body = bytes(range(256)) * 256
    whole = frame(body)
    d = FrameReader(1 << 20)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(len(whole) - 1):
            d.received(whole[i:i + 1])
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 2 * len(whole), f"{held} bytes held for a {len(whole)}-byte partial frame"
    assert d.next_frame() is None and d.has_partial()
    d.received(whole[-1:] + A)
    assert drain(d) == [whole, A]


def test_two_frames_in_one_chunk() -> None:
    d = FrameReader(100)
    d.received(A + B)
    assert drain(d) == [A, B]


def test_trailing_partial_frame_is_held() -> None:
    d = FrameReader(100)
    d.received(A + B[:3])  # not even the whole size prefix of B
    assert drain(d) == [A]
    assert d.has_partial() and d.buffered == 3
    d.received(B[3:6])
    assert drain(d) == [] and d.buffered == 6
    d.received(B[6:])
    assert drain(d) == [B]
    assert d.buffered == 0


def test_frame_spanning_chunks_is_joined_once() -> None:
    d = FrameReader(100)
    d.received(A[:2])
    d.received(A[2:7])
    d.received(A[7:] + B[:1])
    assert drain(d) == [A]
    d.received(B[1:])
    assert drain(d) == [B]


def test_returned_views_stay_valid_after_more_feeding() -> None:
    d = FrameReader(100)
    d.received(A + B[:5])
    first = d.next_frame()
    d.received(B[5:])
    second = d.next_frame()
    assert bytes(first) == A and bytes(second) == B  # type: ignore[arg-type]


def test_empty_payload_frame_and_empty_feed() -> None:
    d = FrameReader(0)
    d.received(b"")
    assert d.next_frame() is None
    d.received(frame(b""))
    assert drain(d) == [b"\x00\x00\x00\x00"]


# -- size boundaries and sticky errors -------------------------------------------------------------
MAX = 16


@pytest.mark.parametrize("size", [MAX - 1, MAX])
def test_sizes_up_to_the_limit_pass(size: int) -> None:
    d = FrameReader(MAX)
    d.received(frame(b"x" * size))
    assert drain(d) == [frame(b"x" * size)]


def test_one_above_the_limit_raises_as_soon_as_the_prefix_is_in() -> None:
    d = FrameReader(MAX)
    d.received(struct.pack(">i", MAX + 1)[:3])  # prefix incomplete: nothing to judge yet
    assert d.next_frame() is None
    with pytest.raises(FrameTooLarge):
        d.received(struct.pack(">i", MAX + 1)[3:])  # the body never needs to arrive
    with pytest.raises(FrameTooLarge):  # sticky: the stream cannot be resynchronised
        d.next_frame()


def test_one_above_the_limit_read_in_place_raises_with_its_last_prefix_byte() -> None:
    d = FrameReader(MAX)
    prefix = struct.pack(">i", MAX + 1)
    read_in_place(d, prefix[:3], [3])   # held in a buffer of its own: the next read takes the rest only
    assert len(d.get_buffer()) == 1 and d.buffered == 3
    with pytest.raises(FrameTooLarge):
        read_in_place(d, prefix[3:] + b"body", [100])
    with pytest.raises(FrameTooLarge):
        d.received(0)


def test_oversized_second_frame_still_delivers_the_first() -> None:
    d = FrameReader(MAX)
    d.received(frame(b"ok") + struct.pack(">i", 1 << 30))
    assert bytes(d.next_frame()) == frame(b"ok")  # type: ignore[arg-type]
    with pytest.raises(FrameTooLarge):
        d.next_frame()


def test_negative_size_is_a_protocol_error_not_too_large() -> None:
    d = FrameReader(MAX)
    with pytest.raises(ProtocolError) as info:
        d.received(struct.pack(">i", -1))
    assert not isinstance(info.value, FrameTooLarge)


def test_one_byte_short_is_not_delivered() -> None:
    d = FrameReader(MAX)
    d.received(frame(b"x" * MAX)[:-1])
    assert d.next_frame() is None and d.has_partial()
    d.received(b"x")
    assert drain(d) == [frame(b"x" * MAX)]


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=40), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_any_chunking_yields_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(p) for p in payloads)
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    d = FrameReader(64)
    got = []
    for a, b in itertools.pairwise(points):
        d.received(stream[a:b])
        got += drain(d)
    assert got == [frame(p) for p in payloads]
    assert d.buffered == 0


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=30), max_size=10), limit=st.integers(min_value=0, max_value=32),
       in_place=st.booleans())
def test_garbage_raises_only_protocol_errors(chunks: list[bytes], limit: int, in_place: bool) -> None:
    d = FrameReader(limit)
    try:
        for c in chunks:
            if in_place:
                read_in_place(d, c, [len(c) or 1])
            else:
                d.received(c)
            for f in drain(d):
                assert len(f) - 4 == struct.unpack(">i", f[:4])[0] <= limit
    except ProtocolError:
        pass


# -- frames out as the parts they arrived in ------------------------------------------------------
def test_next_frame_parts_forwards_a_split_frame_without_joining_it() -> None:
    body = bytes(range(200)) * 50
    whole = struct.pack(">i", len(body)) + body
    two = whole + whole
    for cut in (1, 3, 4, 5, 100, len(whole) - 1, len(whole), len(whole) + 7):
        reader = FrameReader(1 << 20)
        reader.received(two[:cut])
        reader.received(two[cut:])
        got = [reader.next_frame_parts(64), reader.next_frame_parts(64)]
        assert reader.next_frame_parts(64) is None and reader.buffered == 0
        for head, parts in got:  # type: ignore[misc]
            assert b"".join(parts) == whole                  # the parts are the frame, in order
            assert bytes(head) == whole[: len(head)] and len(head) >= 64   # the head is its start


def test_next_frame_parts_copies_the_head_only_when_the_first_part_is_short() -> None:
    body = bytes(range(256)) * 400  # 100 KB
    whole = struct.pack(">i", len(body)) + body
    reader = FrameReader(1 << 20)
    reader.received(b"\x00\x00\x00\x02ab" + whole[:10])  # a small frame, then a read's last 10 bytes
    reader.received(whole[10:60_000])
    reader.received(whole[60_000:])
    assert reader.next_frame_parts(64) is not None
    head, parts = reader.next_frame_parts(1024)  # type: ignore[misc]
    assert bytes(head) == whole[:1024] and len(head.obj) == 1024  # a copy of the head, not of the frame
    assert [len(p) for p in parts] == [10, 59_990, len(whole) - 60_000]


def test_next_frame_parts_waits_for_the_whole_frame() -> None:
    whole = struct.pack(">i", 10) + b"0123456789"
    reader = FrameReader(100)
    reader.received(whole[:9])
    assert reader.next_frame_parts(8) is None
    reader.received(whole[9:])
    head, parts = reader.next_frame_parts(8)  # type: ignore[misc]
    assert len(head) >= 8 and bytes(head) == whole[: len(head)]
    assert [bytes(p) for p in parts] == [whole[:9], whole[9:]]


def test_next_frame_parts_hands_a_read_it_covers_whole_over_as_it_is() -> None:
    # Three frames of 10,244 bytes over five reads: reads a frame covers whole go out as the
    # received objects (no view made per read of a large frame), the cut ones as views.
    body = bytes(range(256)) * 40
    whole = struct.pack(">i", len(body)) + body
    stream = whole * 3
    cuts = (2000, 8000, 12000, 14000, len(stream))
    reads = [stream[a:b] for a, b in zip((0, *cuts[:-1]), cuts, strict=True)]
    reader = FrameReader(1 << 20)
    for data in reads:
        reader.received(data)
    (head1, parts1), (head2, parts2), (head3, parts3) = (reader.next_frame_parts(16) for _ in range(3))  # type: ignore[misc]
    assert parts1[0] is reads[0] and parts1[1] is reads[1] and len(parts1) == 3   # then read 2 up to 10,244
    assert parts2[1] is reads[3] and len(parts2) == 3   # read 2's end, read 3 itself, read 4 up to the cut
    assert all(isinstance(part, memoryview) for part in (parts1[2], parts2[0], parts2[2], *parts3))
    assert [b"".join(parts) for parts in (parts1, parts2, parts3)] == [whole] * 3
    assert all(isinstance(head, memoryview) and bytes(head) == whole[: len(head)]
               for head in (head1, head2, head3))
    assert reader.next_frame_parts(16) is None and reader.buffered == 0


# -- read in place -------------------------------------------------------------------------------
SMALL = [sized(0), sized(1, 1), sized(300, 2), sized(5, 4), sized(3, 6), sized(2000, 9)]
LARGE = [*SMALL[:3], sized(70_000, 3), sized(LARGE_FRAME + 10, 5), sized(3, 6), sized(2_500_000, 8), *SMALL[3:]]


@pytest.mark.parametrize("stream, reads", [(LARGE, [10_000_000]), (SMALL, [1]), (SMALL + LARGE[:5], [3]),
                                           (LARGE, [4096]), (LARGE, [65536]), (LARGE, [1, 65536, 7, 300_000])],
                         ids=["whole", "bytewise", "threes", "4k", "64k", "mixed"])
def test_every_frame_comes_out_whole_however_the_reads_cut_it(stream: list[bytes], reads: list[int]) -> None:
    reader = FrameReader(BIG)
    assert joined(read_in_place(reader, b"".join(stream), reads)) == stream
    assert reader.buffered == 0 and not reader.has_partial()


def test_whole_frames_are_views_of_the_arena_which_is_never_written_again() -> None:
    reader = FrameReader(BIG, ReadArena(size=64 * 1024, low=1024))
    kept = []
    for i in range(200):   # 200 x 1000-byte frames, one per read: several arenas' worth
        ((got,),) = read_in_place(reader, sized(996, i), [1000])
        assert isinstance(got, memoryview) and len(got) == 1000
        kept.append((got, sized(996, i)))
    assert all(bytes(view) == sent for view, sent in kept)   # every view still holds what it was


def test_a_frame_a_read_leaves_incomplete_goes_on_in_buffers_of_its_own() -> None:
    reader = FrameReader(BIG)
    small, large = sized(10), sized(1_500_000)
    (first,), parts = read_in_place(reader, small + large, [20_000])
    # The small frame as a view; the large one's first 19,986 bytes copied into its first segment,
    # 64 KiB more read into it in place, then segments twice as large, up to 1 MiB.
    assert isinstance(first, memoryview) and bytes(first) == small
    segments = [len(part) for part in parts]
    assert all(isinstance(part, bytearray) for part in parts)
    assert segments[0] == 20_000 - 14 + FIRST_SEGMENT
    assert segments[1:3] == [2 * segments[0], 4 * segments[0]]
    assert max(segments) <= LAST_SEGMENT and sum(segments) == len(large)
    assert b"".join(parts) == large


def test_a_size_prefix_alone_makes_kqp_hold_little() -> None:
    reader = FrameReader(BIG)
    assert read_in_place(reader, struct.pack(">i", BIG), [4]) == []   # 8 MiB announced, nothing more sent
    assert len(reader.get_buffer()) == FIRST_SEGMENT                   # room for 64 KiB, not for 8 MiB
    assert reader.buffered == 4 and reader.has_partial()


def test_after_a_large_frame_the_next_size_prefix_is_read_alone() -> None:
    reader = FrameReader(BIG)
    read_in_place(reader, sized(LARGE_FRAME), [65536])
    assert len(reader.get_buffer()) == 4
    nxt = sized(LARGE_FRAME, 3)
    (parts,) = read_in_place(reader, nxt, [300_000])
    # So the next frame is read into its own buffers from its first byte, none of it copied there.
    assert b"".join(parts) == nxt
    assert len(parts[0]) == 4 + FIRST_SEGMENT


def test_a_frame_the_stream_cut_short_stays_held_until_discarded() -> None:
    for cut in (2, 4, 30):
        reader = FrameReader(BIG)
        assert read_in_place(reader, sized(100)[:cut], [cut]) == []
        assert reader.has_partial() and reader.buffered == cut
        assert reader.discard() == cut
        assert reader.buffered == 0 and not reader.has_partial() and reader.next_frame() is None


def test_own_copies_whole_frames_out_of_the_arena_and_moves_an_incomplete_one_into_its_own_buffer() -> None:
    arena = bytearray(sized(5, 1) + sized(5, 2) + sized(5, 3))
    reader = FrameReader(BIG)
    reader.received(memoryview(arena)[:18])
    reader.received(bytearray(sized(2, 9)))   # a frame's own buffer: nobody else's, kept as it is
    assert bytes(reader.next_frame()) == sized(5, 1)  # type: ignore[arg-type]
    reader.own()   # whole frames wait (their connection is muted): copied
    arena[:] = bytes(len(arena))   # the arena reused: what the reader holds is unchanged
    assert drain(reader) == [sized(5, 2), sized(2, 9)]
    arena[:] = sized(5, 4) + sized(5, 5) + sized(5, 6)
    reader.received(memoryview(arena)[:13])   # a frame and the size of the next
    assert drain(reader) == [sized(5, 4)]
    reader.own()
    arena[:] = bytes(len(arena))
    assert reader.buffered == 4 and len(reader.get_buffer()) == 5   # the rest of it goes in after its start
    assert joined(read_in_place(reader, sized(5, 5)[4:], [5])) == [sized(5, 5)]
    reader.received(sized(1, 7))
    assert drain(reader) == [sized(1, 7)]


def test_own_leaves_fed_bytes_as_they_are() -> None:
    # A transport that hands over bytes (no reads in place): nobody writes them, so an incomplete
    # frame stays in them and the rest is fed on without a copy.
    whole = sized(5000, 3)
    start, rest = whole[:3000], whole[3000:]
    reader = FrameReader(BIG)
    reader.received(start)
    reader.own()
    reader.received(rest)
    _, parts = reader.next_frame_parts(64)  # type: ignore[misc]
    assert parts[0] is start and parts[1] is rest


def test_a_read_inside_an_incomplete_frame_is_only_counted() -> None:
    # Nothing can come of it before the frame's buffer is full: the edge need not tell the core.
    reader, whole = FrameReader(BIG), sized(300_000, 5) + sized(300_000, 6)
    events, pos = 0, 0
    while pos < len(whole):
        buf = reader.get_buffer()
        n = min(len(buf), 10_000, len(whole) - pos)
        buf[:n] = whole[pos:pos + n]
        del buf
        pos += n
        if not reader.took(n):
            events += 1
            reader.received(n)
            reader.own()
        if pos == 300_004:   # the first frame is whole: the size after it is read alone
            assert events == 4 and drain(reader) == [sized(300_000, 5)] and len(reader.get_buffer()) == 4
    # The first frame: its first read (the arena), then one for each of its buffers filled (64 KiB +
    # 10,000, twice that, the rest). The second, its size read alone: one for each of its buffers
    # (64 KiB and its size, twice that, the rest), the size read into the first, checked there.
    assert events == 4 + 3 and reader.buffered == 300_004 and drain(reader) == [sized(300_000, 6)]


# -- any stream, any reads, either way in ---------------------------------------------------------
@dataclass(frozen=True)
class Step:
    size: int        # at most this many bytes
    in_place: bool   # read into `get_buffer`, else fed (as bytes, a bytearray or a view)
    take: bool       # the whole frames are taken after it (else they wait, as behind a mute)
    own: bool        # `own()` after it, as the core after each event


steps = st.builds(Step, st.one_of(st.integers(1, 40), st.integers(1, 300_000)), st.booleans(),
                  st.sampled_from([True, True, False]), st.booleans())
frame_sizes = st.one_of(st.integers(0, 3000), st.sampled_from([70_000, LARGE_FRAME - 4, LARGE_FRAME, 1_100_000]))


READS = 2000   # past this many reads, each is at least 64 KiB: a stream of large frames in bounded time


def run(reader: FrameReader, stream: bytes, plan: list[Step]) -> tuple[list[tuple], ProtocolError | None]:
    """`stream` through `reader` as `plan` says (cycled): every frame's parts as handed out, and the
    error that ended the stream, if one did (then checked to be sticky)."""
    frames: list[tuple] = []
    pos, i = 0, 0
    try:
        while True:
            if pos < len(stream):
                step = plan[i % len(plan)]
                i += 1
                size = step.size if i < READS else max(step.size, 65536)
                if step.in_place:
                    buf = reader.get_buffer()
                    n = min(len(buf), size, len(stream) - pos)
                    buf[:n] = stream[pos:pos + n]
                    del buf
                    if not (i % 2 and reader.took(n)):   # as the edge: counted at once inside a frame's buffer
                        reader.received(n)
                else:
                    n = min(size, len(stream) - pos)
                    piece = stream[pos:pos + n]
                    reader.received((piece, bytearray(piece), memoryview(piece))[i % 3])
                pos += n
            else:
                step = Step(1, False, True, False)
            if step.take:
                while (got := reader.next_frame_parts(1 + i % 100)) is not None:
                    head, parts = got
                    assert bytes(head) == b"".join(parts)[: len(head)]
                    frames.append(parts)
            if step.own:
                reader.own()
            if pos == len(stream) and step.take:
                return frames, None
    except ProtocolError as error:
        for call in (reader.next_frame, lambda: reader.received(b"x"), lambda: reader.next_frame_parts(8)):
            with pytest.raises(ProtocolError) as again:
                call()
            assert again.value is error   # sticky: the same error, whatever is asked
        return frames, error


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(frame_sizes, min_size=1, max_size=8), plan=st.lists(steps, min_size=1, max_size=8),
       arena=st.sampled_from([(256 * 1024, 16 * 1024), (4096, 512)]))
def test_any_frames_any_reads_either_way_in(sizes: list[int], plan: list[Step], arena: tuple[int, int]) -> None:
    sent = [sized(size, i) for i, size in enumerate(sizes)]
    reader = FrameReader(BIG, ReadArena(*arena))
    frames, error = run(reader, b"".join(sent), plan)
    assert error is None
    assert joined(frames) == sent   # every part still holds what it was: nothing handed out is rewritten
    assert reader.buffered == 0 and not reader.has_partial()


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(frame_sizes, min_size=0, max_size=5), plan=st.lists(steps, min_size=1, max_size=8),
       bad=st.sampled_from([-1, -(2**31), BIG + 1, 2**31 - 1]), after=st.binary(max_size=300))
def test_a_bad_size_anywhere_raises_once_every_frame_before_it_is_out(sizes: list[int], plan: list[Step], bad: int,
                                                                      after: bytes) -> None:
    sent = [sized(size, i) for i, size in enumerate(sizes)]
    frames, error = run(FrameReader(BIG), b"".join(sent) + struct.pack(">i", bad) + after, plan)
    assert joined(frames) == sent
    assert type(error) is (ProtocolError if bad < 0 else FrameTooLarge)
