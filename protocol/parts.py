"""A frame as the parts it arrived in, addressed by its own offsets, with copies only of what a cut splits.

A large frame (a Produce request of some hundred KB, a Fetch response of a few MB) usually spans
several reads. The frame reader returns it as ``parts``, views whose concatenation is the frame,
so that it is forwarded with ``transport.writelines`` and never joined. The readers that must look
into it (record counts, the ``NodeEndpoints`` tag, ``throttle_time_ms``) address it through
:class:`SplitFrame` by offsets in the whole frame: ``at(pos)`` (the part holding a byte),
``window(pos, size)`` (the part itself, or a copy of the few bytes a part boundary cuts: the only
copy a reader pays), ``views(start, stop)`` (to forward around an unchanged middle) and
``copy(start, stop)`` (for the small regions kqp decodes).

`joined`, `frame_of` and `with_body` serve the few places that need a frame whole or build one.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

__all__ = ["Parts", "SplitFrame", "frame_of", "joined", "with_body"]

#: A frame as ``transport.writelines`` takes it: buffers whose concatenation is the frame.
Parts = tuple[Any, ...]  # memoryview | bytes each

_EMPTY = memoryview(b"")
_SIZE = struct.Struct(">i")


def joined(parts: Parts) -> memoryview:
    """A frame that arrived in several reads, as one buffer (one copy; one part costs none)."""
    return memoryview(parts[0]) if len(parts) == 1 else memoryview(b"".join(parts))


def frame_of(head: bytes | memoryview, body: bytes | memoryview) -> bytes:
    """A whole frame: the size prefix, then `head` (a request or response header), then `body`."""
    return b"".join((_SIZE.pack(len(head) + len(body)), head, body))


def with_body(frame: memoryview, body_offset: int, body: bytes) -> bytes:
    """The frame with a new body: a new size prefix, the same header."""
    return frame_of(frame[4:body_offset], body)


class SplitFrame:
    """Offsets across the parts of one frame. ``total`` is the frame's length, size prefix included."""

    __slots__ = ("parts", "starts", "total")

    def __init__(self, parts: Sequence[Any]) -> None:
        views = []
        starts = []
        total = 0
        for part in parts:
            views.append(part if isinstance(part, memoryview) else memoryview(part))
            starts.append(total)
            total += len(part)
        self.parts: tuple[memoryview, ...] = tuple(views)
        self.starts: list[int] = starts
        self.total = total

    def __len__(self) -> int:
        return self.total

    def at(self, pos: int) -> tuple[memoryview, int]:
        """``(part, start)``: the part holding byte ``pos`` and its offset; an empty view from the end on."""
        if pos >= self.total:
            return _EMPTY, pos
        i = bisect_right(self.starts, pos) - 1  # the last part starting at or before pos: never an empty one
        return self.parts[i], self.starts[i]

    def window(self, pos: int, size: int) -> tuple[Any, int]:
        """``(buf, start)`` with bytes ``pos`` up to ``pos + size`` (or the frame's end) contiguous in ``buf``
        at ``pos - start``: a part, or a fresh copy of just those bytes when a boundary cuts them."""
        total = self.total
        if pos >= total:
            return _EMPTY, pos
        i = bisect_right(self.starts, pos) - 1  # as at(), inline: walks call this at every part boundary
        part, start = self.parts[i], self.starts[i]
        stop = pos + size if pos + size < total else total
        if stop <= start + len(part):
            return part, start
        return self.copy(pos, stop), pos

    def views(self, start: int, stop: int) -> list[memoryview]:
        """Bytes ``start`` up to ``stop`` as views of the parts, in order; nothing is copied."""
        stop = min(stop, self.total)
        out: list[memoryview] = []
        if start >= stop:
            return out
        i = bisect_right(self.starts, start) - 1
        while start < stop:
            part, base = self.parts[i], self.starts[i]
            end = min(base + len(part), stop)
            if end > start:
                out.append(part[start - base : end - base])
                start = end
            i += 1
        return out

    def copy(self, start: int, stop: int) -> bytes:
        """Bytes ``start`` up to ``stop``, joined: only for small regions."""
        return b"".join(self.views(start, stop))
