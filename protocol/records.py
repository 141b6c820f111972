"""Kafka record data read shallowly, and found inside message bodies by schema.

kqp charges record and batch counts (KIP-731) for every Produce request and Fetch response, so
this module is on the hot path. It never builds message objects, never decompresses and never
copies record bytes: it walks a body field by field, skipping each by its length, and reads only
the fixed RecordBatch header fields it needs with ``struct.unpack_from`` on the caller's buffer.

The walk is driven by Apache Kafka's own JSON message schemas as kafka-python ships them
(``kafka/protocol/schemas/resources``): for each (message, version) a *plan* is compiled once, a
flat tuple of skip operations, so which fields exist at which version and whether strings,
bytes and arrays are compact (flexible versions, KIP-482) is never written by hand here.
``produce.py`` and ``fetch.py`` use the plans; ``BodyError`` is the one error any body reader
raises for bytes that do not parse.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache

from kafka.protocol.schemas import BaseField, load_json

__all__ = [
    "BodyError",
    "RecordCounts",
    "count_body_records",
    "count_records",
    "field_position",
    "schema_versions",
]


class BodyError(ValueError):
    """A request or response body that does not parse as its API and version say it should."""


@dataclass(slots=True)
class RecordCounts:
    records: int = 0
    batches: int = 0


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# Every record format (magic 0, 1 and 2) starts with offset int64 and a size int32 counting the
# bytes after it, and keeps its magic byte at offset 16; Kafka's ByteBufferLogInputStream relies
# on the same layout to step from batch to batch without knowing the format.
_LOG_OVERHEAD = 12
_HEADER_UP_TO_MAGIC = 17
_LEGACY_RECORD_OVERHEAD_V0 = 14  # smallest legal size field of a magic 0 message
_BATCH_OVERHEAD_V2 = 61  # a magic 2 RecordBatch header, up to and including recordsCount
_RECORDS_COUNT_OFFSET = 57


def count_records(data: memoryview | bytes) -> RecordCounts:
    """Count records and batches in one records blob (a partition's ``records`` field)."""
    counts = RecordCounts()
    _count_into(data, 0, len(data), counts)
    return counts


def _count_into(buf: memoryview | bytes, pos: int, end: int, acc: RecordCounts) -> None:
    # Mirrors Kafka's shallow batch iteration (ByteBufferLogInputStream.nextBatch): fewer than
    # 17 bytes left, or a batch running past the end, is a partial trailing batch (a Fetch
    # response may be cut at fetch.max.bytes / partition max bytes) and ends the walk quietly;
    # an impossible size or magic is corruption.
    while end - pos >= _HEADER_UP_TO_MAGIC:
        (size,) = _I32.unpack_from(buf, pos + 8)
        if size < _LEGACY_RECORD_OVERHEAD_V0:
            raise BodyError(f"record batch size {size} is below the minimum")
        batch_end = pos + _LOG_OVERHEAD + size
        if batch_end > end:
            return
        magic = buf[pos + 16]
        if magic == 2:
            if size + _LOG_OVERHEAD < _BATCH_OVERHEAD_V2:
                raise BodyError(f"record batch size {size} is below the magic 2 header size")
            (count,) = _I32.unpack_from(buf, pos + _RECORDS_COUNT_OFFSET)
            if count < 0:
                raise BodyError(f"record batch claims {count} records")
            acc.records += count
        elif magic in (0, 1):
            # A magic 0/1 message set has no record count. Kafka's shallow view treats each
            # outer message as one batch (AbstractLegacyRecordBatch) whose count is unknown
            # (countOrNull() is null) until a compressed wrapper is decompressed, which kqp
            # never does: an uncompressed message is exactly one record, a compressed wrapper
            # is counted as one record too, an undercount only pre-0.11 clients can cause.
            acc.records += 1
        else:
            raise BodyError(f"unknown record magic {magic}")
        acc.batches += 1
        pos = batch_end


# --- schema-driven walking -------------------------------------------------------------------

# Plan operations: (kind, argument). Fixed-size runs are merged into one _SKIP.
_SKIP, _STR, _CSTR, _BYTES, _CBYTES, _RECS, _CRECS, _ARRAY, _CARRAY, _TAGS, _NSTRUCT = range(11)

Plan = tuple[tuple[int, object], ...]

_FIXED_SIZES = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "float64": 8, "uuid": 16,
}  # fmt: skip


def _in_versions(spec: str | None, version: int) -> bool:
    bounds = BaseField.parse_versions(spec)
    return bounds is not None and bounds[0] <= version <= bounds[1]


@cache
def _schema(message: str) -> dict:
    return load_json(message)


def schema_versions(message: str) -> range:
    """Versions kqp can walk for a message: 0 up to the schema's newest (kafka-python's range)."""
    return range(BaseField.parse_versions(_schema(message)["validVersions"])[1] + 1)


def _flexible(message: str, version: int) -> bool:
    if version not in schema_versions(message):
        raise BodyError(f"{message} has no version {version}")
    return _in_versions(_schema(message).get("flexibleVersions"), version)


def _compile_fields(fields: list[dict], version: int, flexible: bool) -> list[tuple[int, object]]:
    ops: list[tuple[int, object]] = []
    for field in fields:
        if not _in_versions(field.get("versions"), version):
            continue
        if flexible and _in_versions(field.get("taggedVersions"), version):
            continue  # lives in the struct's tagged-field section, skipped as a whole
        ops.extend(_compile_field(field, version, flexible))
    if flexible:
        ops.append((_TAGS, None))
    return ops


def _compile_field(field: dict, version: int, flexible: bool) -> list[tuple[int, object]]:
    type_str: str = field["type"]
    if type_str.startswith("[]"):
        element = type_str[2:]
        if element in _FIXED_SIZES or element in ("string", "bytes", "records"):
            element_plan = _merge(_compile_field({"type": element}, version, flexible))
        else:
            element_plan = _merge(_compile_fields(field.get("fields", []), version, flexible))
        # An element that is one fixed run lets a whole array be skipped in one step.
        fixed = element_plan[0][1] if len(element_plan) == 1 and element_plan[0][0] == _SKIP else 0
        return [(_CARRAY if flexible else _ARRAY, (element_plan, fixed))]
    if type_str in _FIXED_SIZES:
        return [(_SKIP, _FIXED_SIZES[type_str])]
    if type_str == "string":
        return [(_CSTR if flexible else _STR, None)]
    if type_str == "bytes":
        return [(_CBYTES if flexible else _BYTES, None)]
    if type_str == "records":
        return [(_CRECS if flexible else _RECS, None)]
    if "fields" not in field:
        raise ValueError(f"schema type {type_str!r} has no fields and is not a known primitive")
    inner = _compile_fields(field["fields"], version, flexible)
    if _in_versions(field.get("nullableVersions"), version):
        return [(_NSTRUCT, _merge(inner))]
    return inner


def _merge(ops: list[tuple[int, object]]) -> Plan:
    merged: list[tuple[int, object]] = []
    for kind, arg in ops:
        if kind == _SKIP and merged and merged[-1][0] == _SKIP:
            merged[-1] = (_SKIP, merged[-1][1] + arg)  # type: ignore[operator]
        else:
            merged.append((kind, arg))
    return tuple(merged)


@cache
def _plan(message: str, version: int) -> Plan:
    flexible = _flexible(message, version)
    return _merge(_compile_fields(_schema(message)["fields"], version, flexible))


@cache
def _prefix_plan(message: str, version: int, field_name: str) -> Plan | None:
    """The plan of the top-level fields before ``field_name``, or None if absent at version."""
    flexible = _flexible(message, version)
    ops: list[tuple[int, object]] = []
    for field in _schema(message)["fields"]:
        if not _in_versions(field.get("versions"), version):
            continue
        if flexible and _in_versions(field.get("taggedVersions"), version):
            continue
        if field["name"] == field_name:
            return _merge(ops)
        ops.extend(_compile_field(field, version, flexible))
    return None


def field_position(message: str, version: int, field_name: str, body: memoryview | bytes) -> int | None:
    """Offset in ``body`` of a top-level field, or None when the version does not have it."""
    prefix = _prefix_plan(message, version, field_name)
    if prefix is None:
        return None
    return _walk(prefix, body, 0, len(body), None)


def count_body_records(message: str, version: int, body: memoryview | bytes) -> RecordCounts:
    """Walk a whole body by its schema, counting the records of every ``records`` field."""
    counts = RecordCounts()
    _walk(_plan(message, version), body, 0, len(body), counts)
    return counts


def _truncated(pos: int, end: int) -> BodyError:
    return BodyError(f"body truncated: needs byte {pos}, has {end}")


def _uvarint(buf: memoryview | bytes, pos: int, end: int) -> tuple[int, int]:
    if pos < end and buf[pos] < 0x80:  # lengths and counts below 128: nearly all of them
        return buf[pos], pos + 1
    value = 0
    for shift in range(0, 35, 7):
        if pos >= end:
            raise _truncated(pos, end)
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise BodyError("unsigned varint longer than 5 bytes")


def _walk(plan: Plan, buf: memoryview | bytes, pos: int, end: int, acc: RecordCounts | None) -> int:
    for kind, arg in plan:
        if kind == _SKIP:
            pos += arg  # type: ignore[operator]
        elif kind in (_ARRAY, _CARRAY):
            if kind == _ARRAY:
                if pos + 4 > end:
                    raise _truncated(pos + 4, end)
                (count,) = _I32.unpack_from(buf, pos)
                pos += 4
            else:
                count, pos = _uvarint(buf, pos, end)
                count -= 1
            if count < 0:
                if count != -1:
                    raise BodyError(f"negative array length {count}")
                continue
            # Like Kafka's generated readers: no element is smaller than a byte, so a count
            # beyond the bytes left is corrupt, and it bounds the loop below.
            if count > end - pos:
                raise BodyError(f"array of {count} elements in {end - pos} bytes")
            element_plan, fixed = arg  # type: ignore[misc]
            if fixed:
                pos += count * fixed
            else:
                for _ in range(count):
                    pos = _walk(element_plan, buf, pos, end, acc)
        elif kind == _TAGS:
            if pos < end and buf[pos] == 0:  # no tagged fields: the usual case
                pos += 1
                continue
            count, pos = _uvarint(buf, pos, end)
            for _ in range(count):
                _tag, pos = _uvarint(buf, pos, end)
                size, pos = _uvarint(buf, pos, end)
                pos += size
                if pos > end:
                    raise _truncated(pos, end)
        elif kind == _NSTRUCT:
            if pos >= end:
                raise _truncated(pos + 1, end)
            present = buf[pos]
            pos += 1
            if present == 1:
                pos = _walk(arg, buf, pos, end, acc)  # type: ignore[arg-type]
            elif present != 0xFF:
                raise BodyError(f"nullable struct marker {present}")
        else:
            if kind == _STR:
                if pos + 2 > end:
                    raise _truncated(pos + 2, end)
                (size,) = _I16.unpack_from(buf, pos)
                pos += 2
            elif kind in (_BYTES, _RECS):
                if pos + 4 > end:
                    raise _truncated(pos + 4, end)
                (size,) = _I32.unpack_from(buf, pos)
                pos += 4
            else:  # compact string, bytes or records: unsigned varint length + 1, 0 for null
                size, pos = _uvarint(buf, pos, end)
                size -= 1
            if size < 0:
                if size != -1:
                    raise BodyError(f"negative length {size}")
                continue
            if pos + size > end:
                raise _truncated(pos + size, end)
            if acc is not None and kind in (_RECS, _CRECS):
                _count_into(buf, pos, pos + size, acc)
            pos += size
        if pos > end:
            raise _truncated(pos, end)
    return pos
