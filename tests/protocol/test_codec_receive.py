"""`ReceiveBuffer` and `ReadArena`: reads into buffers kqp owns, whole frames out, nothing rewritten.

Every stream is fed as a buffered transport feeds it (`get_buffer`, fill, `filled`), whole, byte by
byte, cut everywhere and at random (hypothesis), and what comes out goes through the frame decoder,
which must cut exactly the frames that went in.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqp.protocol.errors import FrameTooLarge, ProtocolError
from kqp.protocol.frames import FrameDecoder
from kqp.protocol.receive import FIRST_SEGMENT, LARGE_FRAME, LAST_SEGMENT, ReadArena, ReceiveBuffer

MAX = 8 * 1024 * 1024


def frame(size: int, fill: int = 7) -> bytes:
    return struct.pack(">i", size) + bytes([fill % 256]) * size


def feed(receive: ReceiveBuffer, data: bytes, reads: list[int]) -> list[object]:
    """`data` read in pieces of the sizes listed (cycled), each at most what get_buffer offers: what
    `filled` handed on, in order."""
    out, pos, i = [], 0, 0
    while pos < len(data):
        buf = receive.get_buffer(65536)
        n = min(len(buf), reads[i % len(reads)], len(data) - pos)
        buf[:n] = data[pos:pos + n]
        del buf
        pos, i = pos + n, i + 1
        got = receive.filled(n)
        if got is not None:
            out.append(got)
    return out


def frames_of(handed: list[object]) -> list[bytes]:
    decoder = FrameDecoder(MAX)
    frames = []
    for data in handed:
        decoder.feed(data)  # type: ignore[arg-type]
        while (f := decoder.next_frame()) is not None:
            frames.append(bytes(f))
    assert not decoder.has_partial()
    return frames


SMALL = [frame(0), frame(1, 1), frame(300, 2), frame(5, 4), frame(3, 6), frame(2000, 9)]
LARGE = [*SMALL[:3], frame(70_000, 3), frame(LARGE_FRAME + 10, 5), frame(3, 6), frame(2_500_000, 8), *SMALL[3:]]


@pytest.mark.parametrize("stream, reads", [(LARGE, [10_000_000]), (SMALL, [1]), (SMALL + LARGE[:5], [3]),
                                           (LARGE, [4096]), (LARGE, [65536]), (LARGE, [1, 65536, 7, 300_000])],
                         ids=["whole", "bytewise", "threes", "4k", "64k", "mixed"])
def test_every_frame_comes_out_whole_however_the_reads_cut_it(stream: list[bytes], reads: list[int]) -> None:
    handed = feed(ReceiveBuffer(ReadArena(), MAX), b"".join(stream), reads)
    assert frames_of(handed) == stream


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 100_000), min_size=1, max_size=10),
       reads=st.lists(st.integers(1, 100_000), min_size=1, max_size=8))
def test_any_frames_any_reads(sizes: list[int], reads: list[int]) -> None:
    frames = [frame(size, i) for i, size in enumerate(sizes)]
    assert frames_of(feed(ReceiveBuffer(ReadArena(), MAX), b"".join(frames), reads)) == frames


def test_whole_frames_are_views_of_the_arena_which_is_never_written_again() -> None:
    receive = ReceiveBuffer(ReadArena(size=64 * 1024, low=1024), MAX)
    kept = []
    for i in range(200):   # 200 x 1000-byte frames, one per read: several arenas' worth
        (got,) = feed(receive, frame(996, i), [1000])
        assert isinstance(got, memoryview) and len(got) == 1000
        kept.append((got, frame(996, i)))
    assert all(bytes(view) == sent for view, sent in kept)   # every view still holds what it was


def test_a_frame_a_read_leaves_incomplete_goes_on_in_buffers_of_its_own() -> None:
    receive = ReceiveBuffer(ReadArena(), MAX)
    data = frame(10) + frame(1_500_000)
    handed = feed(receive, data, [20_000])
    # The small frame as a view; the large one's first 19,986 bytes copied into its first segment,
    # 64 KiB more read into it in place, then segments twice as large, up to 1 MiB.
    assert isinstance(handed[0], memoryview) and bytes(handed[0]) == frame(10)
    segments = [len(part) for part in handed[1:]]  # type: ignore[arg-type]
    assert all(isinstance(part, bytearray) for part in handed[1:])
    assert segments[0] == 20_000 - 14 + FIRST_SEGMENT
    assert segments[1:3] == [2 * segments[0], 4 * segments[0]]
    assert max(segments) <= LAST_SEGMENT and sum(segments) == len(frame(1_500_000))
    assert frames_of(handed) == [frame(10), frame(1_500_000)]


def test_a_size_prefix_alone_makes_kqp_hold_little() -> None:
    receive = ReceiveBuffer(ReadArena(), MAX)
    assert feed(receive, struct.pack(">i", MAX), [4]) == []   # 8 MiB announced, nothing more sent
    assert len(receive.get_buffer()) == FIRST_SEGMENT          # room for 64 KiB, not for 8 MiB
    assert receive.held == 4


def test_after_a_large_frame_the_next_size_prefix_is_read_alone() -> None:
    receive = ReceiveBuffer(ReadArena(), MAX)
    feed(receive, frame(LARGE_FRAME), [65536])
    assert len(receive.get_buffer()) == 4
    nxt = frame(LARGE_FRAME, 3)
    handed = feed(receive, nxt, [300_000])
    # So the next frame is read into its own buffers from its first byte, none of it copied there.
    assert frames_of(handed) == [nxt]
    assert len(handed[0]) == 4 + FIRST_SEGMENT  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix, error", [(-1, ProtocolError), (MAX + 1, FrameTooLarge)])
def test_a_size_no_frame_can_have_is_handed_on_for_the_decoder_to_refuse(prefix: int, error: type) -> None:
    receive = ReceiveBuffer(ReadArena(), MAX)
    handed = feed(receive, frame(3) + struct.pack(">i", prefix) + b"garbage", [100])
    assert receive.held == 0   # nothing was allocated for it
    decoder = FrameDecoder(MAX)
    with pytest.raises(error):
        for data in handed:
            decoder.feed(data)  # type: ignore[arg-type]
            while decoder.next_frame() is not None:
                pass
    assert feed(receive, b"more", [100]) == [memoryview(b"more")]   # and from then on, as read


@pytest.mark.parametrize("cut", [2, 4, 30])
def test_flush_hands_on_what_a_stream_cut_short_left(cut: int) -> None:
    receive = ReceiveBuffer(ReadArena(), MAX)
    assert feed(receive, frame(100)[:cut], [cut]) == []
    assert receive.flush() == frame(100)[:cut]
    assert receive.flush() is None and receive.held == 0


def test_the_decoder_owns_what_it_keeps_of_views() -> None:
    arena = bytearray(frame(5, 1) + frame(5, 2) + frame(5, 3))
    decoder = FrameDecoder(MAX)
    decoder.feed(memoryview(arena)[:18])
    decoder.feed(bytearray(frame(2, 9)))   # a frame's own buffer: nobody else's, kept as it is
    assert bytes(decoder.next_frame()) == frame(5, 1)  # type: ignore[arg-type]
    decoder.own()
    arena[:] = bytes(len(arena))   # the arena reused: what the decoder holds is unchanged
    assert [bytes(f) for f in iter(decoder.next_frame, None)] == [frame(5, 2), frame(2, 9)]
