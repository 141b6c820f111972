"""Split a Kafka byte stream into size-prefixed frames, without copying where it can be avoided.

Every Kafka request and response travels as a 4-byte big-endian signed size followed by that many
bytes. :class:`FrameDecoder` is the sans-io half of a connection's reader (h11's
``receive_data``/``next_event`` shape): the transport feeds it the immutable ``bytes`` it received,
and it hands back whole frames as memoryviews over those very objects, or a frame that spans reads
as the parts it arrived in (``next_frame_parts``), never joined.

The size prefix is checked as soon as its 4 bytes are in (as Kafka's ``NetworkReceive`` checks
``socket.request.max.bytes``): a negative size raises :class:`ProtocolError`, one above the limit
:class:`FrameTooLarge`, before a byte of the body is kept. Small reads of an incomplete frame
(under ``COALESCE_BYTES``) go into one ``bytearray``, so a trickled frame costs its size, not an
object per read. Errors are sticky: once the stream is broken every call raises the same error.
"""

from __future__ import annotations

from collections import deque
from struct import Struct

from .errors import FrameTooLarge, ProtocolError
from .parts import SplitFrame

__all__ = ["COALESCE_BYTES", "SIZE_PREFIX", "FrameDecoder"]

SIZE_PREFIX = 4
COALESCE_BYTES = 1024
_SIZE = Struct(">i")
_SIZE_AT = _SIZE.unpack_from


class FrameDecoder:
    """Incremental splitter of one direction of one connection into whole frames."""

    __slots__ = ("_chunks", "_error", "_first", "_max", "_need", "_pos", "_size", "_trickle")

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self._max = max_frame_bytes
        self._chunks: deque[bytes | bytearray | memoryview] = deque()
        self._first: memoryview | None = None  # view over _chunks[0], made once per chunk
        self._pos = 0  # read offset into _chunks[0]
        self._size = 0  # bytes buffered and not yet returned
        self._need = -1  # length of the next frame including its prefix, -1 while unknown
        self._error: ProtocolError | None = None
        self._trickle = bytearray()  # small reads of an incomplete frame, after every chunk

    @property
    def buffered(self) -> int:
        """Bytes held that no returned frame has covered yet."""
        return self._size

    def has_partial(self) -> bool:
        """True if the bytes held do not start with a whole frame (an incomplete frame is pending).

        Meant for the moment a connection ends: call it after ``next_frame()`` returned ``None``
        to learn whether the peer stopped in the middle of a frame.
        """
        return self._size > 0 and (self._need < 0 or self._size < self._need)

    def discard(self) -> int:
        """Drop every byte held (their connection gives up on them); how many there were. A sticky
        error stays: the stream is still broken."""
        dropped = self._size
        self._chunks.clear()
        self._trickle.clear()
        self._first, self._pos, self._size, self._need = None, 0, 0, -1
        return dropped

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Take ``data`` (bytes, or a buffer its giver never writes again); validates a new size prefix."""
        if self._error is not None:
            raise self._error
        if not data:
            return
        size = self._size = self._size + len(data)
        if len(data) < COALESCE_BYTES and 0 <= size < self._need:
            self._trickle += data   # the frame is still incomplete: no chunk per tiny read
            return
        if self._trickle:
            self._chunks.append(bytes(self._trickle))
            self._trickle.clear()
        self._chunks.append(data)
        if self._need < 0:
            self._read_size()

    def own(self) -> None:
        """Copy what is held of views into bytes of its own: the views may be of a buffer shared with
        other connections (a read arena), which the bytes held would otherwise keep alive."""
        owned: deque[bytes | bytearray | memoryview] = deque()
        for chunk in self._chunks:
            if isinstance(chunk, memoryview):
                if not owned:   # the first chunk: from the read offset on
                    chunk = (self._first if self._first is not None else chunk)[self._pos:]
                    self._first, self._pos = None, 0
                chunk = bytes(chunk)
            owned.append(chunk)
        self._chunks = owned

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
