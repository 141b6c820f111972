"""The one schema-driven skip walker over Kafka message bodies: field offsets and record data.

kqp reads or rewrites a handful of fields that may sit behind variable-length data (Produce's
``acks``, ``throttle_time_ms`` after Produce's responses, a Fetch response's ``NodeEndpoints``
tag) and counts records in every ``records`` field. Decoding whole messages would copy record
data and build an object per partition, so bodies are walked, reading only lengths and counts.

Schemas come from kafka-python's public ``load_json`` (never written by hand; the tests walk every
(api, version) against kafka-python's own encoder). Each (message, version, range of top-level
fields) is compiled once into one straight-line Python function, as kafka-python builds its
decoders: an interpreter pays a call per field per element. :meth:`MessageWalker.source` shows it.
Records are skipped by length unless ``on_records`` is given. A frame split over several reads is
walked as its parts by a second generated flavour over a window, with one bounds check per read.
Malformed or truncated input raises :class:`BodyError`, which is a :class:`ProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import cache
from typing import Protocol

from .errors import BodyError
from .parts import SplitFrame
from .schemas import FIXED_SIZES, LENGTH_PREFIXED, fixed_size, in_versions, schema_versions, untagged
from .schemas import schema as message_schema
from .varints import (
    Buffer,
    read_tagged_fields,
    read_uvarint,
    refill,
    skip_tagged_fields,
    skip_tags_in,
    tags_end,
    write_uvarint,
)

__all__ = [
    "BodyError",
    "Buffer",
    "MessageWalker",
    "OnRecords",
    "PartsWalk",
    "RecordSink",
    "Walk",
    "read_tagged_fields",
    "read_uvarint",
    "schema_versions",
    "skip_tagged_fields",
    "walker_for",
    "write_uvarint",
]

OnRecords = Callable[[Buffer, int, int], object]
#: A compiled walk: ``(buf, pos, on_records=None)`` to the offset after the fields it covers.
Walk = Callable[..., int]
#: Its split-frame flavour: ``(frame: SplitFrame, pos, sink: RecordSink | None = None)``, offsets in the frame.
PartsWalk = Callable[..., int]


class RecordSink(Protocol):
    """What a walk over a split frame hands ``records`` fields to (``RecordCounts`` is one)."""

    def add_from(self, buf: Buffer, pos: int, end: int) -> object:
        """A records field lying in one buffer: ``buf[pos:end]``."""

    def add_from_parts(self, frame: SplitFrame, start: int, end: int) -> None:
        """A records field that crosses parts: bytes ``start`` up to ``end`` of ``frame``."""


# --- code generation -------------------------------------------------------------------------


class _Emitter:
    """Writes the body of one walk function; ``run`` holds fixed bytes not yet added to ``pos``.

    With ``parts`` it writes the split-frame flavour: ``need`` guards each read with a refill of
    the window, tag sections and records fields that leave the window go to the frame-level helpers.
    """

    def __init__(self, version: int, flexible: bool, parts: bool = False) -> None:
        self.version, self.flexible, self.parts = version, flexible, parts
        self.lines: list[str] = []
        self.run = 0

    def need(self, depth: int, size: int) -> None:
        """Make the next ``size`` bytes readable at ``pos`` (split-frame flavour only)."""
        if self.parts:
            self.emit(depth, f"if pos + {size} > lim:",
                      f"    buf, base, pos, lim, end = _refill(frame, base + pos, {size})")

    def emit(self, depth: int, *lines: str) -> None:
        if self.run:
            self.lines.append("    " * depth + f"pos += {self.run}")
            self.run = 0
        self.lines.extend("    " * depth + line for line in lines)

    def block(self, depth: int, fill: Callable[[], None]) -> None:
        """Emit an indented block at ``depth``; a block that turns out empty gets a ``pass``."""
        mark = len(self.lines)
        fill()
        self.emit(depth)
        if len(self.lines) == mark:
            self.lines.append("    " * depth + "pass")

    def struct(self, fields: list[dict], depth: int) -> None:
        for field in untagged(fields, self.version, self.flexible):
            self.field(field, depth)
        if self.flexible:
            self.need(depth, 1)
            skip = "buf, base, pos, lim, end = _skip_tags_in(frame, base + pos)" if self.parts else \
                "pos = _skip_tags(buf, pos)"
            self.emit(depth, "if buf[pos]:", f"    {skip}", "else:", "    pos += 1")

    def field(self, field: dict, depth: int) -> None:
        kind = field["type"]
        size = fixed_size(field, self.version, self.flexible)
        if size is not None:
            self.run += size
        elif kind.startswith("[]"):
            self.array(field, kind[2:], depth)
        elif kind in LENGTH_PREFIXED:
            self.length_prefixed(kind, depth)
        elif "fields" not in field:
            raise ValueError(f"schema type {kind!r} has no fields and is not a known primitive")
        elif in_versions(field.get("nullableVersions"), self.version):
            # KIP-893 nullable struct: an int8 marker, negative for null (Kafka reads `< 0`).
            self.need(depth, 1)
            self.emit(depth, "m = buf[pos]", "pos += 1", "if m < 128:")
            self.block(depth + 1, lambda: self.struct(field["fields"], depth + 1))
        else:
            self.struct(field["fields"], depth)

    def read_count(self, depth: int, what: str) -> None:
        """Leave the array count or string length in ``n`` (-1 for null) and step past it."""
        if self.flexible:
            # An unsigned varint holding N + 1 (0 for null). Up to three bytes inline: counts and
            # names take one, a partition's records (up to 2 MB) two or three; longer ones call.
            self.need(depth, 5)
            self.emit(depth, "n = buf[pos]", "if n < 128:", "    pos += 1",
                      "elif buf[pos + 1] < 128:", "    n = (n & 127) | buf[pos + 1] << 7", "    pos += 2",
                      "elif buf[pos + 2] < 128:",
                      "    n = (n & 127) | (buf[pos + 1] & 127) << 7 | buf[pos + 2] << 14", "    pos += 3",
                      "else:", "    n, pos = _uvarint(buf, pos)", "n -= 1")  # fmt: skip
        elif what == "string":
            self.need(depth, 2)
            self.emit(depth, "(n,) = _I16(buf, pos)", "pos += 2")
        else:
            self.need(depth, 4)
            self.emit(depth, "(n,) = _I32(buf, pos)", "pos += 4")

    def length_prefixed(self, kind: str, depth: int) -> None:
        self.read_count(depth, kind)
        if kind == "records" and self.parts:
            self.emit(depth, "if n > 0:", "    if sink is not None:",
                      "        if pos + n > end:", "            raise _truncated(base + pos + n, base + end)",
                      "        if pos + n <= lim:", "            add(buf, pos, pos + n)",
                      "        else:", "            add_parts(frame, base + pos, base + pos + n)",
                      "    pos += n")  # fmt: skip
        elif kind == "records":
            self.emit(depth, "if n > 0:", "    if on_records is not None:",
                      "        if pos + n > end:", "            raise _truncated(pos + n, end)",
                      "        on_records(buf, pos, pos + n)", "    pos += n")  # fmt: skip
        else:
            self.emit(depth, "if n > 0:", "    pos += n")
        if not self.flexible:  # a compact length cannot be below -1
            self.emit(depth, "elif n < -1:", "    raise BodyError(f'negative length {n}')")

    def element_size(self, item: dict) -> int | None:
        """An array element's constant size (skipped as ``n * size``), or None to walk each element."""
        return fixed_size(item, self.version, self.flexible)

    def array(self, field: dict, element: str, depth: int) -> None:
        self.read_count(depth, "array")
        # No element is smaller than a byte (Kafka's generated readers reason the same way), so a
        # count beyond the bytes left is corrupt; the check also bounds the loop below. Empty and
        # null arrays (aborted transactions, most tag-like lists) skip the loop set-up entirely.
        self.emit(depth, "if n > 0:", "    if n > end - pos:", "        raise _bad_count(n, end - pos)")
        if element in FIXED_SIZES or element in LENGTH_PREFIXED:
            item: dict = {"type": element}
        else:
            item = {"type": element, "fields": field.get("fields", []), "versions": "0+"}
        size = self.element_size(item)
        if size is not None:
            self.emit(depth + 1, f"pos += n * {size}")
        else:
            self.emit(depth + 1, "for _ in range(n):")  # range() is evaluated once: inner loops may reuse n
            self.block(depth + 2, lambda: self.field(item, depth + 2))
        if not self.flexible:
            self.emit(depth, "elif n < -1:", "    raise _bad_count(n, end - pos)")


def _truncated(needed: int, end: int) -> BodyError:
    return BodyError(f"body truncated: needs byte {needed}, has {end}")


def _bad_count(n: int, left: int) -> BodyError:
    return BodyError(f"array count {n} impossible with {left} bytes left")


_NAMESPACE = {
    "BodyError": BodyError,
    "_SHORT": (struct.error, IndexError),
    "_I16": struct.Struct(">h").unpack_from,
    "_I32": struct.Struct(">i").unpack_from,
    "_bad_count": _bad_count,
    "_refill": refill,
    "_skip_tags": skip_tagged_fields,
    "_skip_tags_in": skip_tags_in,
    "_truncated": _truncated,
    "_uvarint": read_uvarint,
}


class MessageWalker:
    """Field boundaries of one message (request or response body) at one version.

    ``names`` are the schema's names (``"ThrottleTimeMs"``) of the untagged top-level fields, in
    wire order; kafka-python's snake_case names for them come in the same order.
    """

    __slots__ = ("_fields", "_walks", "flexible", "message", "names", "version")

    def __init__(self, message: str, version: int) -> None:
        schema = message_schema(message)
        if version not in schema_versions(message):
            raise BodyError(f"{message} has no version {version}")
        self.message, self.version = message, version
        self.flexible = in_versions(schema.get("flexibleVersions"), version)
        self._fields = tuple(untagged(schema["fields"], version, self.flexible))
        self.names: tuple[str, ...] = tuple(f["name"] for f in self._fields)
        self._walks: dict[tuple[int, int, bool], Walk] = {}

    def index(self, name: str) -> int:
        return self.names.index(name)

    def source(self, first: int, stop: int, parts: bool = False) -> str:
        """The generated Python source walking top-level fields ``first`` up to ``stop`` (exclusive);
        with ``parts``, the flavour over a :class:`SplitFrame`."""
        out = _Emitter(self.version, self.flexible, parts)
        for field in self._fields[first:stop]:
            out.field(field, 2)
        out.emit(2)
        body = "\n".join(out.lines) or "        pass"
        if parts:
            return (
                "def walk(frame, pos, sink=None):\n"
                "    buf, base = frame.at(pos)\n"
                "    pos -= base\n"
                "    lim = len(buf)\n"
                "    end = frame.total - base\n"
                "    if sink is not None:\n"
                "        add = sink.add_from\n"
                "        add_parts = sink.add_from_parts\n"
                "    try:\n"
                f"{body}\n"
                "    except _SHORT:\n"
                "        raise BodyError(_WHAT + ' body truncated') from None\n"
                "    if pos > end:\n"
                "        raise _truncated(base + pos, base + end)\n"
                "    return base + pos\n"
            )
        return (
            "def walk(buf, pos, on_records=None):\n"
            "    end = len(buf)\n"
            "    try:\n"
            f"{body}\n"
            "    except _SHORT:\n"
            "        raise BodyError(_WHAT + ' body truncated') from None\n"
            "    if pos > end:\n"
            "        raise _truncated(pos, end)\n"
            "    return pos\n"
        )

    def _walk(self, first: int, stop: int, parts: bool = False) -> Walk:
        walk = self._walks.get((first, stop, parts))
        if walk is None:
            namespace = dict(_NAMESPACE, _WHAT=f"{self.message} v{self.version}")
            name = f"<walk {self.message} v{self.version} [{first}:{stop}]{' parts' if parts else ''}>"
            code = compile(self.source(first, stop, parts), name, "exec")
            exec(code, namespace)  # our own generated source: integers and the helpers above only
            walk = self._walks[first, stop, parts] = namespace["walk"]
        return walk

    def field_start(self, buf: Buffer, pos: int, index: int, on_records: OnRecords | None = None) -> int:
        """Offset of untagged top-level field ``index`` for a body starting at ``pos``."""
        return self._walk(0, index)(buf, pos, on_records)

    def prefix(self, index: int) -> Walk:
        """The compiled ``(buf, pos, on_records=None) -> offset of field index``, for per-frame callers."""
        return self._walk(0, index)

    def prefix_parts(self, index: int) -> PartsWalk:
        """The split-frame flavour of :meth:`prefix`: ``(frame, pos, sink=None) -> offset of field index``."""
        return self._walk(0, index, parts=True)

    def boundaries(self, buf: Buffer, pos: int, upto: int | None = None, first: int = 0) -> list[int]:
        """Start offsets of the untagged top-level fields, then the offset where they end.

        With ``upto``, stops after field ``upto - 1``; with ``first``, ``pos`` is where field
        ``first`` starts and the offsets begin there (``upto - first + 1`` offsets). In flexible
        versions the top-level tagged fields start at the last offset of a full walk.
        """
        out = [pos]
        for i in range(first, len(self._fields) if upto is None else upto):
            pos = self._walk(i, i + 1)(buf, pos)
            out.append(pos)
        return out

    def tagged_start(self, buf: Buffer, pos: int, on_records: OnRecords | None = None) -> int:
        """Offset after every untagged top-level field: the top-level tag section in flexible versions."""
        return self._walk(0, len(self._fields))(buf, pos, on_records)

    def body_end(self, buf: Buffer, pos: int, on_records: OnRecords | None = None) -> int:
        """Offset where the whole body ends, its top-level tagged fields included."""
        pos = self._walk(0, len(self._fields))(buf, pos, on_records)
        if not self.flexible:
            return pos
        try:
            return skip_tagged_fields(buf, pos)
        except IndexError:
            raise _truncated(pos + 1, len(buf)) from None

    def tagged_start_parts(self, frame: SplitFrame, pos: int, sink: RecordSink | None = None) -> int:
        """:meth:`tagged_start` over a split frame: ``pos`` and the result are offsets in the frame."""
        return self._walk(0, len(self._fields), parts=True)(frame, pos, sink)

    def body_end_parts(self, frame: SplitFrame, pos: int, sink: RecordSink | None = None) -> int:
        """:meth:`body_end` over a split frame: ``pos`` and the result are offsets in the frame."""
        pos = self._walk(0, len(self._fields), parts=True)(frame, pos, sink)
        if not self.flexible:
            return pos
        try:
            return tags_end(frame, pos)
        except IndexError:
            raise _truncated(pos + 1, frame.total) from None


def walker_for(message: type | str, version: int) -> MessageWalker:
    """The (cached) walker for a message at ``version``: a schema name such as ``"FetchResponse"``,
    or a kafka-python message class (``FetchResponse``), whose schema name is taken from it."""
    return _walker(message if isinstance(message, str) else message.name, version)


@cache
def _walker(message: str, version: int) -> MessageWalker:
    return MessageWalker(message, version)
