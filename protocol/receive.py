"""Where a connection's reads land: buffers kqp owns, filled in place by the transport.

A transport that reads into buffers its protocol hands out (asyncio's `BufferedProtocol`:
`get_buffer`, then `buffer_updated`) spares the bytes object it would otherwise allocate and copy
each read into. `ReadArena` is one event loop's read buffer, shared by its connections: a read lands
in its free tail, and what a read filled is never written again, so the frames in it are handed on
as memoryviews for as long as anyone holds them. `ReceiveBuffer` is one direction of one connection:
it follows the size prefixes and hands on whole frames. A frame still incomplete when a read ends is
received in buffers of its own (segments, each handed on when full): the next reads go straight into
them, so a frame of up to 64 KiB more than its first read arrives in one piece, a larger one in a few
segments, never joined. A segment is at most 64 KiB beyond the bytes already received, then twice
the last one (up to 1 MiB), so a size prefix alone never makes kqp hold much. Bytes that cannot be
framed (a negative size, one above the limit) are handed on as they are, for the frame decoder to
raise the connection's protocol error.
"""

from __future__ import annotations

from struct import Struct

from .frames import SIZE_PREFIX

__all__ = ["ARENA_BYTES", "ReadArena", "ReceiveBuffer"]

ARENA_BYTES = 256 * 1024   # one arena's size: what uvloop reads at most at a time anyway
ARENA_LOW = 16 * 1024      # a tail shorter than this is left unused: a read gets a fresh arena
# After a frame this large, the next read takes its size prefix alone, so that the frame after it
# is received in its own buffer from its first byte (one more read of 4 bytes, against a copy of
# up to an arena's worth of it).
LARGE_FRAME = 256 * 1024
FIRST_SEGMENT = 64 * 1024   # an incomplete frame's first buffer: at most this beyond what was read of it
LAST_SEGMENT = 1024 * 1024  # segments double up to this
_SIZE_AT = Struct(">i").unpack_from


class ReadArena:
    """One loop's shared read buffer: each read lands in the free tail; filled bytes are never rewritten."""

    __slots__ = ("_buf", "_pos", "_view", "low", "size")

    def __init__(self, size: int = ARENA_BYTES, low: int = ARENA_LOW) -> None:
        if not 0 < low <= size:
            raise ValueError("need 0 < low <= size")
        self.size, self.low = size, low
        self._buf = bytearray(0)
        self._view = memoryview(self._buf)
        self._pos = 0

    def tail(self) -> memoryview:
        """Where the next read goes (a fresh arena when little is left; the old one lives on in the
        views made of it)."""
        if len(self._buf) - self._pos < self.low:
            self._buf = bytearray(self.size)
            self._view = memoryview(self._buf)
            self._pos = 0
        return self._view[self._pos:]

    def take(self, nbytes: int) -> memoryview:
        """The `nbytes` the last read put at the start of `tail()`, from now on never written again."""
        start = self._pos
        self._pos = start + nbytes
        return self._view[start : self._pos]


class ReceiveBuffer:
    """One direction of one connection: reads in, whole frames out (`filled` returns them)."""

    __slots__ = ("_arena", "_fill", "_frame", "_left", "_max", "_prefix", "_total", "_unframed")

    def __init__(self, arena: ReadArena, max_frame_bytes: int) -> None:
        self._arena, self._max = arena, max_frame_bytes
        self._frame: bytearray | None = None   # the segment of an incomplete frame being received
        self._fill = 0                          # ... how much of it is in
        self._left = 0                          # ... the frame's bytes after this segment
        self._total = 0                         # ... the frame's size
        self._prefix: bytearray | None = None   # a size prefix being read on its own
        self._unframed = False                  # the stream cannot be framed: bytes go on as read

    @property
    def held(self) -> int:
        """Bytes read and not yet handed on (an incomplete frame)."""
        if self._frame is not None:
            return self._fill
        return 0 if self._prefix is None else self._fill

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next read goes (`BufferedProtocol.get_buffer`)."""
        if self._frame is not None:
            return memoryview(self._frame)[self._fill:]
        if self._prefix is not None:
            return memoryview(self._prefix)[self._fill:]
        return self._arena.tail()

    def filled(self, nbytes: int) -> bytes | bytearray | memoryview | None:
        """The last read put `nbytes` where `get_buffer` said: the whole frames it completed (views of
        the arena, or a frame's own buffer), or None while a frame is still incomplete."""
        if self._frame is not None:
            self._fill += nbytes
            segment = self._frame
            if self._fill < len(segment):
                return None
            if self._left:   # full, and the frame goes on: the next segment, twice as large
                self._frame = bytearray(min(self._left, LAST_SEGMENT, max(2 * len(segment), FIRST_SEGMENT)))
                self._left -= len(self._frame)
                self._fill = 0
                return segment
            self._frame = None
            if self._total >= LARGE_FRAME and not self._unframed:
                self._prefix, self._fill = bytearray(SIZE_PREFIX), 0
            return segment
        if self._prefix is not None:
            self._fill += nbytes
            return self._prefix_filled()
        data = self._arena.take(nbytes)
        if self._unframed:
            return data
        pos, end = 0, nbytes
        while end - pos >= SIZE_PREFIX:
            (size,) = _SIZE_AT(data, pos)
            if size < 0 or size > self._max:
                self._unframed = True   # the decoder raises the error: nothing of it is kept here
                return data
            if pos + SIZE_PREFIX + size > end:
                self._begin(data[pos:], SIZE_PREFIX + size)
                return data[:pos] if pos else None
            pos += SIZE_PREFIX + size
        if pos < end:   # a size prefix cut short: the rest of it is read on its own
            self._prefix = bytearray(SIZE_PREFIX)
            self._prefix[: end - pos] = data[pos:]
            self._fill = end - pos
            return data[:pos] if pos else None
        return data

    def _begin(self, start: memoryview, size: int) -> None:
        """An incomplete frame of `size` bytes, `start` of it read: the rest goes into segments of its own."""
        first = min(size, len(start) + FIRST_SEGMENT)
        frame = self._frame = bytearray(first)
        frame[: len(start)] = start
        self._fill, self._left, self._total = len(start), size - first, size

    def _prefix_filled(self) -> bytes | bytearray | None:
        prefix = self._prefix
        assert prefix is not None
        if self._fill < SIZE_PREFIX:
            return None
        self._prefix = None
        (size,) = _SIZE_AT(prefix, 0)
        if size < 0 or size > self._max:
            self._unframed = True
            return bytes(prefix)
        self._begin(memoryview(prefix), SIZE_PREFIX + size)
        if size == 0:   # an empty frame is complete with its prefix (the decoder decides what it is worth)
            frame, self._frame = self._frame, None
            return frame
        return None

    def flush(self) -> bytes | None:
        """What is held of an incomplete frame, handed on at the end of the stream (the decoder says the
        frame was cut short); None when nothing is held."""
        if self._frame is not None:   # earlier segments were handed on already
            held = bytes(self._frame[: self._fill])
        elif self._prefix is not None and self._fill:
            held = bytes(self._prefix[: self._fill])
        else:
            return None
        self._frame = self._prefix = None
        self._fill = 0
        return held
