"""Split a Kafka byte stream into size-prefixed frames, reading in place where the transport can.

Every Kafka request and response is a 4-byte big-endian size and that many bytes. A :class:`FrameReader`
is one direction of one connection: a read goes where it says (``get_buffer``, asyncio's
``BufferedProtocol``) and ``received`` takes its byte count, or the bytes a transport handed over; whole
frames come out as memoryviews over them, or a frame that spans reads as the parts it arrived in
(``next_frame_parts``), never joined. Reads land in a :class:`ReadArena`, one loop's buffer shared by
its connections, whose filled bytes are never written again; a frame a read leaves incomplete goes on in
buffers of its own (64 KiB beyond what was read of it, then doubling to 1 MiB), and after a large frame
the next size prefix is read alone, so a large frame arrives in place. Each size prefix is parsed once
and checked as soon as its 4 bytes are in (as Kafka's ``NetworkReceive``): a negative size raises
:class:`ProtocolError`, one above the limit :class:`FrameTooLarge`, before a byte of the body is kept;
once raised, every call raises it. Small reads handed over of an incomplete frame share one
``bytearray``: a trickled frame costs its size.
"""

from __future__ import annotations

from collections import deque
from struct import Struct

from .errors import FrameTooLarge, ProtocolError
from .parts import SplitFrame

__all__ = ["ARENA_BYTES", "COALESCE_BYTES", "FIRST_SEGMENT", "LARGE_FRAME", "LAST_SEGMENT", "SIZE_PREFIX",
           "FrameReader", "ReadArena"]

SIZE_PREFIX = 4
COALESCE_BYTES = 1024       # reads of bytes handed over shorter than this, of an incomplete frame, are coalesced
ARENA_BYTES = 256 * 1024    # one arena's size: what uvloop reads at most at a time anyway
ARENA_LOW = 16 * 1024       # a tail shorter than this is left unused: a read gets a fresh arena
# After a frame this large, the next read takes its size prefix alone, so that the frame after it
# is read into its own buffer from its first byte (one more read of 4 bytes, against a copy of up
# to an arena's worth of it).
LARGE_FRAME = 256 * 1024
FIRST_SEGMENT = 64 * 1024   # an incomplete frame's first buffer: at most this beyond what was read of it
LAST_SEGMENT = 1024 * 1024  # segments double up to this
PREFIX_ALONE = -1           # `FrameReader._left` while its open buffer is a size prefix read alone
_SIZE = Struct(">i")
_SIZE_AT = _SIZE.unpack_from



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


class FrameReader:
    """One direction of one connection: reads in (in place, or bytes handed over), whole frames out.

    What is held is a queue of chunks (views of the arena, a frame's own buffers, bytes handed over), then at
    most one open buffer where in-place reads of an incomplete frame go (`_open`): a segment of it, or
    its size prefix read alone. Nothing in the queue is written again, so frames are handed out as
    views of it.
    """

    __slots__ = ("_arena", "_chunks", "_error", "_fill", "_first", "_left", "_max", "_need", "_open", "_pos",
                 "_size", "_trickle")

    def __init__(self, max_frame_bytes: int, arena: ReadArena | None = None) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self._max = max_frame_bytes
        self._arena = ReadArena() if arena is None else arena   # shared by a loop's connections
        self._chunks: deque[bytes | bytearray | memoryview] = deque()
        self._first: memoryview | None = None  # view over _chunks[0], made once per chunk
        self._pos = 0  # read offset into _chunks[0]
        self._size = 0  # bytes queued and not yet returned (the open buffer's not included)
        self._need = -1  # length of the queue's first frame including its prefix, -1 while unknown
        self._error: ProtocolError | None = None
        self._trickle = bytearray()  # small reads handed over of an incomplete frame, after every chunk
        self._open: bytearray | None = None  # where in-place reads of an incomplete frame go
        self._fill = 0  # ... how much of it is in (0 while there is none)
        self._left = 0  # ... the frame's bytes after it (PREFIX_ALONE: it is a size prefix)

    @property
    def buffered(self) -> int:
        """Bytes held that no returned frame has covered yet."""
        return self._size + self._fill

    def has_partial(self) -> bool:
        """True if the bytes held do not start with a whole frame (an incomplete frame is pending).

        Meant for the moment a connection ends: call it after ``next_frame()`` returned ``None``
        to learn whether the peer stopped in the middle of a frame.
        """
        if not self._size:
            return self._fill > 0
        return self._need < 0 or self._size < self._need

    def discard(self) -> int:
        """Drop every byte held (their connection gives up on them); how many there were. A sticky
        error stays: the stream is still broken."""
        dropped = self._size + self._fill
        self._chunks.clear()
        self._trickle.clear()
        self._first, self._pos, self._size, self._need = None, 0, 0, -1
        self._open, self._fill, self._left = None, 0, 0
        return dropped

    # -- in -----------------------------------------------------------------------------------------
    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next read goes (`BufferedProtocol.get_buffer`): an incomplete frame's own buffer,
        else the arena's free tail."""
        buf = self._open
        if buf is None and (not self._size or (buf := self._place()) is None):
            return self._arena.tail()
        return memoryview(buf)[self._fill:]

    def took(self, nbytes: int) -> bool:
        """True when a read in place went into an incomplete frame's own buffer and nothing can come
        of it yet: the buffer is not full, or it was a size prefix read alone, now checked, whose
        frame's first segment opens. The connection need not hear of it (an event per segment, not
        per read). False: it must (`received`)."""
        buf = self._open
        if buf is None:
            return False
        fill = self._fill + nbytes
        if fill < len(buf):
            self._fill = fill
            return True
        if self._left != PREFIX_ALONE or self._size:   # a segment is full, or a frame waits before it
            return False
        (size,) = _SIZE_AT(buf, 0)
        if not 0 < size <= self._max:   # an empty frame, or one the connection refuses: it hears of it
            return False
        first = self._open = bytearray(SIZE_PREFIX + min(size, FIRST_SEGMENT))   # as `_place` would
        first[:SIZE_PREFIX] = buf
        self._fill, self._left, self._need = SIZE_PREFIX, size + SIZE_PREFIX - len(first), size + SIZE_PREFIX
        return True

    def own(self) -> None:
        """Keep nothing that is a view of a buffer shared with other connections (a read arena), which
        it would keep alive: the start of an incomplete frame moves into its own buffer, where the next
        reads go; whole frames held (their connection is muted) are copied into bytes."""
        if self._open is not None or not self._size:
            return
        for chunk in self._chunks:
            if isinstance(chunk, memoryview):
                break
        else:   # bytes handed over stay as they are: nobody writes them (and the next come on without a copy)
            return
        if self._place() is not None:
            return
        owned: deque[bytes | bytearray | memoryview] = deque()
        for chunk in self._chunks:
            if isinstance(chunk, memoryview):
                if not owned:   # the first chunk: from the read offset on
                    chunk = (self._first if self._first is not None else chunk)[self._pos:]
                    self._first, self._pos = None, 0
                chunk = bytes(chunk)
            owned.append(chunk)
        self._chunks = owned

    def _place(self) -> bytearray | None:
        """If what is queued is the start of one incomplete frame, it moves into a buffer of its own,
        which is returned: the frame's first segment (at most `FIRST_SEGMENT` beyond what was read),
        or its size prefix when that was cut short. None when the queue holds a whole frame, or a
        frame whose size is not parsed yet."""
        size, need = self._size, self._need
        if size < SIZE_PREFIX:
            buf, self._left = bytearray(SIZE_PREFIX), PREFIX_ALONE
        elif size < need and self._error is None:
            buf = bytearray(min(need, size + FIRST_SEGMENT))
            self._left = need - len(buf)
        else:
            return None
        pos, chunks = 0, self._chunks
        if chunks:
            first = self._first if self._first is not None else memoryview(chunks[0])
            for i, chunk in enumerate(chunks):
                part = first[self._pos:] if i == 0 else chunk
                buf[pos : pos + len(part)] = part
                pos += len(part)
            chunks.clear()
        if trickle := self._trickle:
            buf[pos : pos + len(trickle)] = trickle
            trickle.clear()
        self._first, self._pos, self._size = None, 0, 0
        self._open, self._fill = buf, size
        return buf

    def received(self, data: bytes | bytearray | memoryview | int) -> None:
        """What the last read brought: how many bytes it put where `get_buffer` said, or the bytes
        themselves (from a transport that hands bytes over; their giver never writes them again).
        Checks a new size prefix as soon as its 4 bytes are in."""
        if type(data) is int:   # a read in place (`type() is`: cheaper than isinstance, on every read)
            if self._open is not None:
                self._open_filled(data)
                return
            data = self._arena.take(data)
        chunk: bytes | bytearray | memoryview = data  # type: ignore[assignment]  # (mypy narrows `type() is` one way)
        if self._error is not None:
            raise self._error
        if not chunk:
            return
        if self._open is not None:
            self._copy_in(chunk)
            return
        size = self._size = self._size + len(chunk)
        if len(chunk) < COALESCE_BYTES and 0 <= size < self._need:
            self._trickle += chunk   # the frame is still incomplete: no chunk per tiny read
            return
        if self._trickle:
            self._chunks.append(bytes(self._trickle))
            self._trickle.clear()
        self._chunks.append(chunk)
        if self._need < 0:
            self._read_size()

    def _open_filled(self, nbytes: int) -> None:
        """A read put `nbytes` into the open buffer: when it is full, it goes into the queue (a size
        prefix read alone is checked there) and the frame's next segment opens."""
        buf = self._open
        assert buf is not None
        fill = self._fill = self._fill + nbytes
        if fill < len(buf):
            return
        left = self._left
        self._open, self._fill, self._left = None, 0, 0
        if left == PREFIX_ALONE:
            self.received(buf)   # checked now (or queued behind a frame not yet taken)
            return
        self._chunks.append(buf)
        self._size += fill
        if left:   # the frame goes on: the next segment, twice as large
            segment = self._open = bytearray(min(left, LAST_SEGMENT, max(2 * fill, FIRST_SEGMENT)))
            self._left = left - len(segment)
        elif self._need >= LARGE_FRAME:   # so that the next frame is read in place from its first byte
            self._open, self._left = bytearray(SIZE_PREFIX), PREFIX_ALONE

    def _copy_in(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes handed over while an incomplete frame has buffers of its own: into them, as reads in
        place, until the frame is complete; the rest goes on as it is."""
        view, pos = memoryview(data), 0
        while (buf := self._open) is not None:
            fill = self._fill
            n = min(len(buf) - fill, len(view) - pos)
            buf[fill : fill + n] = view[pos : pos + n]
            pos += n
            self._open_filled(n)
            if pos == len(view):
                return
        self.received(view[pos:])

    # -- out -----------------------------------------------------------------------------------------
    def next_frame(self) -> memoryview | None:
        """One whole frame including its size prefix, or ``None`` if it has not fully arrived."""
        need = self._need
        if need < 0:
            need = self._read_size()  # raises the sticky error, if there is one
            if need < 0:
                return None
        if self._size < need:
            return None
        first = self._first
        if first is None:
            first = self._first = memoryview(self._chunks[0])
        pos = self._pos
        end = pos + need
        left = len(first) - end
        if left > 0:
            frame = first[pos:end]
            self._pos = end
        elif left == 0:  # the frame ends the chunk: often the chunk *is* the frame
            frame = first[pos:] if pos else first
            self._chunks.popleft()
            self._first = None
            self._pos = 0
        else:
            frame = memoryview(self._take_joined(need))
        self._size -= need
        self._need = -1
        # The next prefix is validated on the next call (not here), so the frame just cut is
        # never lost to an error that belongs to the frame after it.
        return frame

    def next_frame_parts(self, head_bytes: int) -> tuple[memoryview, tuple[bytes | bytearray | memoryview, ...]] | None:
        """One whole frame as ``(head, parts)`` without joining a frame that spans chunks.

        ``parts`` are buffers whose concatenation is the frame (for ``transport.writelines``): views,
        and the received ``bytes`` themselves where the frame covers a whole read; ``head`` is a
        contiguous start of the frame of at least ``head_bytes`` bytes (or all of it), for reading
        its header.
        A frame inside one chunk comes back as ``(frame, (frame,))``; a split frame costs at most a
        copy of its first ``head_bytes``, so a large frame can be forwarded without the full copy
        (readers of its body take the parts: :mod:`kqp.protocol.parts`).
        """
        need = self._need
        if need < 0:
            if not self._size and self._error is None:   # nothing held: the usual end of a read's frames
                return None
            need = self._read_size()
            if need < 0:
                return None
        if self._size < need:
            return None
        first = self._first
        if first is None:
            first = self._first = memoryview(self._chunks[0])
        pos = self._pos
        end = pos + need
        if end <= len(first):   # the frame lies in one chunk (next_frame's cut, inline: once per frame)
            if end < len(first):
                frame = first[pos:end]
                self._pos = end
            else:
                frame = first[pos:] if pos else first
                self._chunks.popleft()
                self._first = None
                self._pos = 0
            self._size -= need
            self._need = -1
            return frame, (frame,)
        parts = tuple(self._take_parts(need))
        self._size -= need
        self._need = -1
        head_len = min(head_bytes, need)
        # The first part is often a read's last few bytes: copy the head only, never the frame.
        head = memoryview(parts[0]) if len(parts[0]) >= head_len else memoryview(SplitFrame(parts).copy(0, head_len))
        return head, parts

    def _take_parts(self, need: int) -> list[bytes | bytearray | memoryview]:
        """Cut ``need`` bytes off the front: a chunk they cover whole goes as it is (the received
        ``bytes``, no view made: a large frame is mostly such chunks), the first from the read
        offset and the last up to the cut as views."""
        chunks = self._chunks
        parts: list[bytes | bytearray | memoryview] = []
        pos = self._pos
        while need:
            chunk = chunks[0]
            avail = len(chunk) - pos
            if avail > need:   # the cut falls inside this chunk, which stays for the next frame
                first = self._first if self._first is not None else memoryview(chunk)
                parts.append(first[pos : pos + need])
                self._first = first
                pos += need
                break
            if pos:
                parts.append((self._first if self._first is not None else memoryview(chunk))[pos:])
            else:
                parts.append(chunk)
            chunks.popleft()
            self._first = None
            pos = 0
            need -= avail
        self._pos = pos
        return parts

    def _take_joined(self, need: int) -> bytes:
        """Cut ``need`` bytes that span several chunks: the one copy a split frame costs."""
        return b"".join(self._take_parts(need))

    def _read_size(self) -> int:
        """Parse and check the next size prefix if its 4 bytes are in; the frame length or -1."""
        if self._error is not None:
            raise self._error
        if self._size < SIZE_PREFIX:
            return -1
        first = self._chunks[0]
        pos = self._pos
        if len(first) - pos >= SIZE_PREFIX:
            (size,) = _SIZE_AT(first, pos)
        else:
            head = bytearray()
            for chunk in self._chunks:
                head += chunk[pos : pos + SIZE_PREFIX - len(head)]
                pos = 0
                if len(head) == SIZE_PREFIX:
                    break
            (size,) = _SIZE.unpack(head)
        if size < 0:
            self._error = ProtocolError(f"negative frame size {size}")
            raise self._error
        if size > self._max:
            self._error = FrameTooLarge(f"frame size {size} exceeds the maximum of {self._max} bytes")
            raise self._error
        self._need = size + SIZE_PREFIX
        return self._need
