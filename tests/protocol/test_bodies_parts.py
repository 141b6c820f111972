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
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from codec_support import sample_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqp.protocol.apis import kqp_ranges, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.parts import SplitFrame
from kqp.protocol.records import BodyError
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


