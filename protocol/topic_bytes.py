"""Record bytes per topic, and the few per-partition facts an adaptive pool reads, in one walk.

Topic pools charge each ``records`` field's size in a Produce request or a Fetch response to its
topic. Adaptive pools read the responses to their members' requests: the upstream's own
``throttle_time_ms``, Produce partitions answered REQUEST_TIMED_OUT, and whether a Fetch's broker
had more to give than it returned (then its time is latency, not a wait on ``max_wait_ms``). Only
principals in such pools pay for this walk.

The schema walker's generated code is compiled here with *marks*: a field named in ``_MARKS`` at a
nesting level (body, topic, partition) is handed to the sink as ``mark(code, buf, start, end)``
during the walk, and every ``records`` field as ``add_from`` (or ``add_from_parts``), as record
counting does. Record data is never read, except a Fetch batch header when its high watermark is
wanted. Produce v13, Fetch v13+ and ShareFetch name topics by id (KIP-516): those come back as
``uuid.UUID``. A ShareFetch response says nothing of what is left to fetch (``more`` stays False).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from functools import cache

from .errors import BodyError
from .parts import Parts, SplitFrame
from .schemas import fixed_size, in_versions, schema_versions, untagged
from .schemas import schema as message_schema
from .varints import Buffer

# The walker's code generator and its generated code's helpers: this module compiles the same walks
# with marks, so it shares them rather than copying them.
from .walker import _NAMESPACE, _Emitter

__all__ = ["TopicBytes", "fetch_response_topics", "produce_request_topics", "produce_response_signals",
           "share_fetch_response_topics"]

TOPIC, THROTTLE, ERROR, WATERMARK = range(4)
REQUEST_TIMED_OUT = 7
_NAME = {(1, "Name"): TOPIC, (1, "Topic"): TOPIC, (1, "TopicId"): TOPIC}
_MARKS: dict[str, dict[tuple[int, str], int]] = {
    "ProduceRequest": _NAME,
    "FetchResponse": {**_NAME, (0, "ThrottleTimeMs"): THROTTLE, (2, "HighWatermark"): WATERMARK},
    "ProduceResponse": {(0, "ThrottleTimeMs"): THROTTLE, (2, "ErrorCode"): ERROR},
    "ShareFetchResponse": {(1, "TopicId"): TOPIC, (0, "ThrottleTimeMs"): THROTTLE},
}
_I16, _I32, _I64 = (struct.Struct(f).unpack_from for f in (">h", ">i", ">q"))
_ENTRY = struct.Struct(">qi").unpack_from   # every record format: offset int64, size int32
# Every format keeps its magic byte at 16; a magic 2 batch (at least 61 bytes) its lastOffsetDelta at 23..27.
_LOG_OVERHEAD, _UP_TO_MAGIC, _UP_TO_DELTA = 12, 17, 27


class _Marking(_Emitter):
    """The walker's emitter, handing marked fields to ``mark`` (module docstring)."""

    def __init__(self, version: int, flexible: bool, parts: bool, marks: dict[tuple[int, str], int]) -> None:
        super().__init__(version, flexible, parts)
        self.marks, self.level = marks, 0

    def array(self, field: dict, element: str, depth: int) -> None:
        self.level += 1
        super().array(field, element, depth)
        self.level -= 1

    def _marked_inside(self, field: dict) -> bool:
        return "fields" in field and any(level >= self.level for level, _ in self.marks)

    def element_size(self, item: dict) -> int | None:
        return None if self._marked_inside(item) else super().element_size(item)   # None: walk each element

    def field(self, field: dict, depth: int) -> None:
        code = self.marks.get((self.level, field.get("name", "")))
        size = fixed_size(field, self.version, self.flexible)
        if code is None:
            if size is not None and self._marked_inside(field):
                self.struct(field["fields"], depth)   # a struct of fixed size, walked for a mark inside it
            else:
                super().field(field, depth)
            return
        if size is not None:
            self.need(depth, size)
            self.emit(depth, f"mark({code}, buf, pos, pos + {size})")
            self.run += size
            return
        if field["type"] != "string":
            raise ValueError(f"cannot mark {field['name']} of type {field['type']}")
        self.read_count(depth, "string")
        if self.parts:
            self.emit(depth, "if pos + n > lim:", "    buf, base, pos, lim, end = _refill(frame, base + pos, n)")
        self.emit(depth, "if n < 0:", "    raise BodyError('null topic name')", f"mark({code}, buf, pos, pos + n)",
                  "pos += n")


_HEAD = """def walk(buf, pos, sink):
    end = len(buf)
    on_records = sink.add_from
    mark = sink.mark
"""
_HEAD_PARTS = """def walk(frame, pos, sink):
    buf, base = frame.at(pos)
    pos -= base
    lim = len(buf)
    end = frame.total - base
    add = sink.add_from
    add_parts = sink.add_from_parts
    mark = sink.mark
"""
_TAIL = """    try:
{body}
    except _SHORT:
        raise BodyError(_WHAT + ' body truncated') from None
    if pos > end:
        raise _truncated({at}pos, {at}end)
    return {at}pos
"""


@cache
def _walk(message: str, version: int, parts: bool) -> Callable[..., int]:
    """The marked walk over every untagged top-level field of ``message`` at ``version``."""
    schema = message_schema(message)
    flexible = in_versions(schema.get("flexibleVersions"), version)
    out = _Marking(version, flexible, parts, _MARKS[message])
    for field in untagged(schema["fields"], version, flexible):
        out.field(field, 2)
    out.emit(2)
    body = "\n".join(out.lines) or "        pass"
    source = (_HEAD_PARTS if parts else _HEAD) + _TAIL.format(body=body, at="base + " if parts else "")
    namespace = dict(_NAMESPACE, _WHAT=f"{message} v{version}")
    exec(compile(source, f"<marked walk {message} v{version}{' parts' if parts else ''}>", "exec"), namespace)
    return namespace["walk"]


class TopicBytes:
    """What one walk found: ``sizes`` (records bytes per topic key, in first-seen order), and for
    responses ``throttle_ms``, ``timeouts`` (Produce partitions REQUEST_TIMED_OUT), ``more`` (some
    Fetch partition's high watermark is beyond the last offset it returned) and ``records_bytes``."""

    __slots__ = ("_by_id", "_topic", "_watermark", "more", "records_bytes", "sizes", "throttle_ms", "timeouts")

    def __init__(self, by_id: bool) -> None:
        self.sizes: dict[bytes, int] = {}
        self.throttle_ms = self.timeouts = self.records_bytes = 0
        self.more = False
        self._by_id, self._topic, self._watermark = by_id, b"", -1

    def topics(self) -> list[tuple[str | uuid.UUID, int]]:
        """``(topic name, or id for v13+, bytes)`` per topic that carried records."""
        return [(uuid.UUID(bytes=key) if self._by_id else key.decode("utf-8", "replace"), n)
                for key, n in self.sizes.items() if n]

    # -- the walk's sink -------------------------------------------------------------------------------
    def mark(self, code: int, buf: Buffer, start: int, end: int) -> None:
        if code == TOPIC:
            self._topic = bytes(buf[start:end])
        elif code == WATERMARK:
            self._watermark = _I64(buf, start)[0]
        elif code == THROTTLE:
            self.throttle_ms = _I32(buf, start)[0]
        elif _I16(buf, start)[0] == REQUEST_TIMED_OUT:
            self.timeouts += 1

    def add_from(self, buf: Buffer, pos: int, end: int) -> None:
        self._add(end - pos)
        if self._watermark > 0 and not self.more:
            self.more = _last_offset(lambda _pos, _size: (buf, 0), pos, end) + 1 < self._watermark

    def add_from_parts(self, frame: SplitFrame, start: int, end: int) -> None:
        self._add(end - start)
        if self._watermark > 0 and not self.more:
            self.more = _last_offset(frame.window, start, end) + 1 < self._watermark

    def _add(self, n: int) -> None:
        self.sizes[self._topic] = self.sizes.get(self._topic, 0) + n
        self.records_bytes += n


def _last_offset(window: Callable[[int, int], tuple[Buffer, int]], pos: int, end: int) -> int:
    """The last offset of the last whole batch in bytes ``pos`` up to ``end`` (-1: none is whole), each
    batch header read through ``window`` (a frame's parts: ``SplitFrame.window``, a copy only where
    cut). A magic 2 batch ends at base offset + lastOffsetDelta; a legacy entry's offset is its last
    (a compressed wrapper carries its last inner offset)."""
    last = -1
    while end - pos >= _UP_TO_MAGIC:
        buf, start = window(pos, _UP_TO_DELTA)
        at = pos - start
        offset, size = _ENTRY(buf, at)
        if size < 0 or pos + _LOG_OVERHEAD + size > end:
            break
        last = offset + _I32(buf, at + 23)[0] if buf[at + 16] == 2 else offset
        pos += _LOG_OVERHEAD + size
    return last


_VERSIONS = {message: schema_versions(message) for message in _MARKS}


def _read(message: str, api_version: int, parts: Parts, body_offset: int, by_id: bool) -> TopicBytes:
    if api_version not in _VERSIONS[message]:
        raise BodyError(f"{message} has no version {api_version}")
    sink = TopicBytes(by_id)
    if len(parts) == 1:
        _walk(message, api_version, False)(memoryview(parts[0]), body_offset, sink)
    else:
        _walk(message, api_version, True)(SplitFrame(parts), body_offset, sink)
    return sink


def produce_request_topics(api_version: int, parts: Parts, body_offset: int) -> TopicBytes:
    """Records bytes per topic of a Produce request frame (as the parts it arrived in, size prefix
    included, its body at ``body_offset``)."""
    return _read("ProduceRequest", api_version, parts, body_offset, api_version >= 13)


def fetch_response_topics(api_version: int, parts: Parts, body_offset: int) -> TopicBytes:
    """Records bytes per topic of a Fetch response frame, its throttle_time_ms, and whether the
    broker had more to give (``more``)."""
    return _read("FetchResponse", api_version, parts, body_offset, api_version >= 13)


def produce_response_signals(api_version: int, parts: Parts, body_offset: int) -> TopicBytes:
    """A Produce response's throttle_time_ms and its partitions answered REQUEST_TIMED_OUT."""
    return _read("ProduceResponse", api_version, parts, body_offset, False)


def share_fetch_response_topics(api_version: int, parts: Parts, body_offset: int) -> TopicBytes:
    """Records bytes per topic id of a ShareFetch response frame, and its throttle_time_ms."""
    return _read("ShareFetchResponse", api_version, parts, body_offset, True)
