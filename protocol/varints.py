"""Kafka's unsigned varints and tagged-field sections, read in place or across a split frame.

The primitives the generated walkers (`walker.py`) call: a flexible version's compact lengths and
counts are unsigned varints, and every struct of one ends in a tagged-field section. The
``*_in`` / ``refill`` forms read from a `SplitFrame` (a frame as the slices it arrived in), copying
only the few bytes a cut splits.
"""

from __future__ import annotations

from typing import Any

from .errors import BodyError
from .parts import SplitFrame

__all__ = ["Buffer", "read_tagged_fields", "read_uvarint", "refill", "skip_tagged_fields", "skip_tags_in",
           "tags_end", "uvarint_in", "write_uvarint"]

Buffer = Any  # memoryview | bytes | bytearray: whatever unpack_from and indexing accept


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes, as Kafka's ``ByteUtils.readUnsignedVarint``) and the next offset."""
    b = buf[pos]
    if b < 0x80:  # the overwhelmingly common case: one byte
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 28:
            raise BodyError("unsigned varint longer than 5 bytes")


def write_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """Offset after a tagged-fields section (count, then tag/size/bytes per field)."""
    if buf[pos] == 0:
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise BodyError("tagged field runs past the end of the frame")
    return pos


def read_tagged_fields(buf: Buffer, pos: int) -> tuple[list[tuple[int, int, int]], int]:
    """The entries of a tagged-fields section as ``(tag, value_start, value_end)``, and the end offset."""
    entries = []
    try:
        count, pos = read_uvarint(buf, pos)
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            if pos + size > len(buf):
                raise BodyError("tagged field runs past the end of the frame")
            entries.append((tag, pos, pos + size))
            pos += size
    except IndexError:
        raise BodyError("tagged fields truncated") from None
    return entries, pos


def refill(frame: SplitFrame, pos: int, size: int) -> tuple[Buffer, int, int, int, int]:
    """A split-frame walk's new state for reading ``size`` bytes at frame offset ``pos``:
    ``(buf, base, pos, lim, end)``, where ``buf`` holds them at ``pos - base``."""
    buf, base = frame.window(pos, size)
    return buf, base, pos - base, len(buf), frame.total - base


def uvarint_in(frame: SplitFrame, pos: int) -> tuple[int, int]:
    buf, base = frame.window(pos, 5)
    value, end = read_uvarint(buf, pos - base)
    return value, base + end


def tags_end(frame: SplitFrame, pos: int) -> int:
    """:func:`skip_tagged_fields` at offset ``pos`` of a split frame: each varint read from a window."""
    count, pos = uvarint_in(frame, pos)
    for _ in range(count):
        _tag, pos = uvarint_in(frame, pos)
        size, pos = uvarint_in(frame, pos)
        pos += size
    if pos > frame.total:
        raise BodyError("tagged field runs past the end of the frame")
    return pos


def skip_tags_in(frame: SplitFrame, pos: int) -> tuple[Buffer, int, int, int, int]:
    """A split-frame walk's state after the tag section at frame offset ``pos``."""
    return refill(frame, tags_end(frame, pos), 0)


# --- schema access ------------------------------------------------------------------------------
