"""Skip over Kafka message fields by schema, without decoding them.

kqp reads or rewrites a handful of fields (``throttle_time_ms``, broker addresses, the top-level
tagged fields of Produce and Fetch responses) that may sit behind variable-length data: Produce
puts ``throttle_time_ms`` after its responses array, ApiVersions after its api keys, and a Fetch
response's ``NodeEndpoints`` tag comes after every partition's record data. Decoding the whole
message with kafka-python to reach them would copy record data and allocate an object per
partition. Instead this module compiles, once per (message, version), a *skip walker* from
kafka-python's parsed JSON schema (``cls._struct``: the field tree kafka-python builds from Apache
Kafka's ``*.json`` message definitions): a tree of small closures that only advance an offset,
reading nothing but lengths and counts. Record data is skipped by its length prefix.

Nothing here hand-writes a schema: field order, presence per version, types, nullability and
which versions are flexible (compact lengths + tagged fields) all come from kafka-python.
kafka-python's schema objects are not public API; kqp pins ``kafka-python>=3.0.12,<4`` and the
tests walk every (api, version) to catch a change.

Buffers are anything ``struct.unpack_from`` and indexing accept (memoryview, bytes, bytearray).
Malformed input raises :class:`ProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kafka.protocol.schemas.fields.array import ArrayField
from kafka.protocol.schemas.fields.simple import SimpleField
from kafka.protocol.schemas.fields.struct import StructField
from kafka.protocol.schemas.fields.struct_array import StructArrayField

from .errors import ProtocolError

__all__ = [
    "MessageWalker",
    "read_tagged_fields",
    "read_uvarint",
    "skip_tagged_fields",
    "walker_for",
    "write_uvarint",
]

Buffer = Any  # memoryview | bytes | bytearray: whatever unpack_from accepts
Skip = Callable[[Buffer, int], int]

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I8 = struct.Struct(">b").unpack_from

# Wire size of kafka-python's fixed-size simple types (codec classes carry a ``size`` attribute).
_VARIABLE = "variable"


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
            raise ProtocolError("unsigned varint longer than 5 bytes")


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
        raise ProtocolError("tagged field runs past the end of the frame")
    return pos


def read_tagged_fields(buf: Buffer, pos: int) -> tuple[list[tuple[int, int, int]], int]:
    """The entries of a tagged-fields section as ``(tag, value_start, value_end)``, and the end offset."""
    count, pos = read_uvarint(buf, pos)
    entries = []
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise ProtocolError("tagged field runs past the end of the frame")
        entries.append((tag, pos, pos + size))
        pos += size
    return entries, pos


# --- compilation of skip closures -------------------------------------------------------------


def _fixed(n: int) -> Skip:
    return lambda buf, pos: pos + n


def _length_skip(width: int, compact: bool) -> Skip:
    """Nullable string (int16 length) or bytes/records (int32 length), or their compact form."""
    if compact:

        def skip_compact(buf: Buffer, pos: int) -> int:
            n, pos = read_uvarint(buf, pos)
            return pos + n - 1 if n else pos

        return skip_compact
    read, step = (_I16, 2) if width == 2 else (_I32, 4)

    def skip_classic(buf: Buffer, pos: int) -> int:
        (n,) = read(buf, pos)
        if n < -1:
            raise ProtocolError(f"negative length {n}")
        return pos + step + (n if n > 0 else 0)

    return skip_classic


def _count_reader(compact: bool) -> Callable[[Buffer, int], tuple[int, int]]:
    """Array length (-1 = null) and the next offset; rejects counts the buffer cannot hold."""

    def read_count(buf: Buffer, pos: int) -> tuple[int, int]:
        if compact:
            n, pos = read_uvarint(buf, pos)
            n -= 1
        else:
            (n,) = _I32(buf, pos)
            pos += 4
        if n < -1 or n > len(buf) - pos:
            raise ProtocolError(f"array count {n} impossible with {len(buf) - pos} bytes left")
        return n, pos

    return read_count


def _simple_size(field: SimpleField) -> int | None:
    size = field._type.size
    return None if size == _VARIABLE else size


def _simple_skip(field: SimpleField, compact: bool) -> tuple[Skip, int | None]:
    size = _simple_size(field)
    if size is not None:
        return _fixed(size), size
    width = 2 if field.type_str == "string" else 4  # "bytes" and "records" have int32 lengths
    return _length_skip(width, compact), None


def _array_skip(field: ArrayField, version: int, flexible: bool) -> Skip:
    read_count = _count_reader(flexible)
    if isinstance(field, StructArrayField):
        elem, elem_size = _struct_skip(field.array_of, version, flexible, nullable=False)
    else:
        elem, elem_size = _simple_skip(field.array_of, flexible)
    if elem_size is not None:

        def skip_fixed_array(buf: Buffer, pos: int) -> int:
            n, pos = read_count(buf, pos)
            return pos + n * elem_size if n > 0 else pos

        return skip_fixed_array

    def skip_array(buf: Buffer, pos: int) -> int:
        n, pos = read_count(buf, pos)
        for _ in range(n):
            pos = elem(buf, pos)
        return pos

    return skip_array


def _field_skip(field: Any, version: int, flexible: bool) -> tuple[Skip, int | None]:
    """A skip closure for one field at one version, and its constant size when it has one."""
    if isinstance(field, ArrayField):  # StructArrayField is an ArrayField too
        return _array_skip(field, version, flexible), None
    if isinstance(field, StructField):
        return _struct_skip(field, version, flexible, nullable=field.nullable_for_version_q(version))
    if isinstance(field, SimpleField):
        return _simple_skip(field, flexible)
    raise TypeError(f"unknown kafka-python field type {type(field).__name__}")


def _struct_skip(struct_field: StructField, version: int, flexible: bool, nullable: bool) -> tuple[Skip, int | None]:
    ops: list[Skip] = []
    run = 0  # adjacent fixed-size fields collapse into one step
    for f in struct_field.untagged_fields(version):
        skip, size = _field_skip(f, version, flexible)
        if size is not None:
            run += size
            continue
        if run:
            ops.append(_fixed(run))
            run = 0
        ops.append(skip)
    if not ops and not flexible and not nullable:
        return _fixed(run), run
    if run:
        ops.append(_fixed(run))
    steps = tuple(ops)

    def skip_struct(buf: Buffer, pos: int) -> int:
        if nullable:  # KIP-893 nullable struct: int8 -1 = null, 1 = present
            (marker,) = _I8(buf, pos)
            pos += 1
            if marker < 0:
                return pos
        for step in steps:
            pos = step(buf, pos)
        if flexible:
            pos = skip_tagged_fields(buf, pos)
        return pos

    return skip_struct, None


class MessageWalker:
    """Field boundaries of one message (request or response body) at one version.

    ``names`` are kafka-python's snake_case names of the untagged top-level fields, in wire order.
    """

    __slots__ = ("_skips", "flexible", "names", "struct", "version")

    def __init__(self, struct_field: StructField, version: int, flexible: bool) -> None:
        self.struct = struct_field
        self.version = version
        self.flexible = flexible
        fields = struct_field.untagged_fields(version)
        self.names: tuple[str, ...] = tuple(f.name for f in fields)
        self._skips: tuple[Skip, ...] = tuple(_field_skip(f, version, flexible)[0] for f in fields)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def field_start(self, buf: Buffer, pos: int, index: int) -> int:
        """Offset of untagged top-level field ``index`` for a body starting at ``pos``."""
        try:
            for skip in self._skips[:index]:
                pos = skip(buf, pos)
        except (struct.error, IndexError) as exc:
            raise ProtocolError(f"truncated body: {exc}") from None
        if pos > len(buf):
            raise ProtocolError("truncated body")
        return pos

    def boundaries(self, buf: Buffer, pos: int, upto: int | None = None) -> list[int]:
        """Start offsets of the untagged top-level fields, then the offset where they end.

        With ``upto``, stops after field ``upto - 1`` (``upto + 1`` offsets). In flexible versions
        the top-level tagged fields start at the last offset of a full walk.
        """
        out = [pos]
        try:
            for skip in self._skips[:upto]:
                pos = skip(buf, pos)
                out.append(pos)
        except (struct.error, IndexError) as exc:
            raise ProtocolError(f"truncated body: {exc}") from None
        if pos > len(buf):
            raise ProtocolError("truncated body")
        return out

    def tagged_start(self, buf: Buffer, pos: int) -> int:
        """Offset of the top-level tagged-fields section (flexible versions only)."""
        return self.field_start(buf, pos, len(self._skips))


@cache
def walker_for(message_cls: type, version: int) -> MessageWalker:
    """The (cached) walker for a kafka-python message class (e.g. ``FetchResponse``) at ``version``."""
    return MessageWalker(message_cls._struct, version, message_cls.flexible_version_q(version))
