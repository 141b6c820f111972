"""Find and rewrite every broker address a client can see in a response.

kqp listens on one port per upstream node, so each ``host:port`` an upstream advertises must be
replaced by kqp's own before the client sees it. Which responses carry addresses is derived from
the schemas kqp carries at import: a struct holding both a ``host`` and a ``port`` field is an
endpoint (Metadata, FindCoordinator, DescribeCluster, DescribeQuorum, the KIP-951 ``NodeEndpoints``
tag of Produce v10+ and Fetch v16+, and the ``NodeEndpoints`` of ShareFetch and ShareAcknowledge;
the list and the look-alikes left alone are in protocol/README.md).

The skip walker finds the byte range of the top-level field that holds the endpoints; only that
field is decoded (with kafka-python's field objects, which come in the walker's order: a test
checks it) and re-encoded, and the frame is spliced around it. Responses on the hot path, usually
split over several reads, are walked as their parts past their records to the field or tag section
that may hold endpoints (one byte says whether it holds any); only then is that tail copied and decoded.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.schemas.fields.struct import StructField
from kafka.protocol.schemas.fields.struct_array import StructArrayField

from .apis import kqp_ranges, message_classes
from .errors import ProtocolError
from .parts import Parts, SplitFrame
from .walker import (
    Buffer,
    MessageWalker,
    OnRecords,
    PartsWalk,
    RecordSink,
    Walk,
    read_tagged_fields,
    walker_for,
    write_uvarint,
)

__all__ = ["AddressMapper", "BrokerAddress", "may_carry_addresses", "names_brokers", "rewrite_addresses",
           "rewrite_addresses_parts"]

_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int


#: (node_id, upstream host, upstream port) -> (host, port) the client should see.
AddressMapper = Callable[[int, str, int], tuple[str, int]]


def _struct_of(field: Any) -> StructField | None:
    if isinstance(field, StructArrayField):
        return field.array_of
    if isinstance(field, StructField):
        return field
    return None


def _is_endpoint(struct_field: StructField, version: int) -> bool:
    names = {f.name for f in struct_field.untagged_fields(version)}
    return "host" in names and "port" in names


def _holds_records(field: Any, version: int) -> bool:
    if field.type_str == "records":
        return True
    inner = _struct_of(field)
    return inner is not None and any(_holds_records(f, version) for f in inner.untagged_fields(version))


def _holds_endpoint(field: Any, version: int) -> bool:
    inner = _struct_of(field)
    if inner is None:
        return False
    if _is_endpoint(inner, version):
        return True
    return any(_holds_endpoint(f, version) for f in inner.untagged_fields(version))


@dataclass(frozen=True, slots=True)
class _Plan:
    walker: MessageWalker
    fields: tuple[Any, ...]  # kafka-python's untagged top-level fields, in the walker's order
    whole: bool  # the top-level struct is itself the endpoint (FindCoordinator v0-v3)
    untagged: tuple[int, ...]  # indexes of top-level untagged fields holding endpoints
    tagged: dict[int, Any]  # tag -> kafka-python field, for top-level tagged fields holding endpoints
    to_tags: Walk | None  # compiled walk to the top-level tag section, when ``tagged``
    to_tags_parts: PartsWalk | None  # the same over a split frame
    # Untagged endpoint fields behind records (ShareFetch's NodeEndpoints): the walks to the first of
    # them, which then starts a small tail of the frame, copied only when it holds an endpoint.
    to_tail: Walk | None = None
    to_tail_parts: PartsWalk | None = None


def _build() -> dict[tuple[int, int], _Plan]:
    plans = {}
    for api_key, (lo, hi) in kqp_ranges().items():
        response_cls = message_classes(api_key)[1]
        top = response_cls._struct
        for version in range(lo, hi + 1):
            walker = walker_for(response_cls, version)
            fields = tuple(top.untagged_fields(version))
            assert len(fields) == len(walker.names), (api_key, version)  # one schema, one field order
            whole = _is_endpoint(top, version)
            untagged = tuple(i for i, f in enumerate(fields) if _holds_endpoint(f, version))
            tagged = {}
            if walker.flexible:
                tagged = {f.tag: f for f in top.tagged_fields(version)._fields if _holds_endpoint(f, version)}
            if whole or untagged or tagged:
                to_tags = walker.prefix(len(walker.names)) if tagged else None
                to_tags_parts = walker.prefix_parts(len(walker.names)) if tagged else None
                tail = bool(untagged) and any(_holds_records(f, version) for f in fields[:untagged[0]])
                plans[api_key, version] = _Plan(
                    walker, fields, whole, untagged, tagged, to_tags, to_tags_parts,
                    walker.prefix(untagged[0]) if tail else None, walker.prefix_parts(untagged[0]) if tail else None)
    return plans


_PLANS = _build()


def may_carry_addresses(api_key: int, api_version: int) -> bool:
    """Whether this response version can hold a broker endpoint (cheap table lookup)."""
    return (api_key, api_version) in _PLANS


def names_brokers(api_key: int) -> bool:
    """Whether any version of this API's response that kafka-python's schema describes (from v0,
    decodable or not) can hold a broker endpoint: such an API is never passed on blindly."""
    response_cls = message_classes(api_key)[1]
    top = response_cls._struct
    hi = response_cls.valid_versions[1]
    return any(_is_endpoint(top, v) or any(_holds_endpoint(f, v) for f in top.untagged_fields(v))
               or any(_holds_endpoint(f, v) for f in top.tagged_fields(v)._fields)
               for v in range(hi + 1))


class _Rewriter:
    """Walks decoded kafka-python objects, recording and remapping every endpoint it meets."""

    __slots__ = ("changed", "mapper", "seen", "version")

    def __init__(self, mapper: AddressMapper, version: int) -> None:
        self.mapper = mapper
        self.version = version
        self.seen: list[BrokerAddress] = []
        self.changed = False

    def visit(self, value: Any, parent_node: int = -1) -> None:
        if isinstance(value, list):
            for item in value:
                self.visit(item, parent_node)
            return
        struct_field = getattr(value, "_struct", None)
        if struct_field is None:
            return
        fields = struct_field.untagged_fields(self.version)
        names = {f.name for f in fields}
        node = parent_node
        for id_name in ("node_id", "broker_id"):
            if id_name in names:
                node = getattr(value, id_name)
        if "host" in names and "port" in names:
            self._endpoint(value, node, getattr(value, "error_code", 0) if "error_code" in names else 0)
        for f in fields:
            if _struct_of(f) is not None:
                self.visit(getattr(value, f.name), node)

    def _endpoint(self, value: Any, node: int, error_code: int) -> None:
        host, port = value.host, value.port
        if node < 0 or error_code != 0 or not host:
            return  # e.g. a FindCoordinator error: node -1, host "", port -1; nothing to redirect
        self.seen.append(BrokerAddress(node, host, port))
        new_host, new_port = self.mapper(node, host, port)
        if (new_host, new_port) != (host, port):
            value.host, value.port = new_host, new_port
            self.changed = True


# What kafka-python's decoders raise on bytes that do not fit the schema.
_DECODE_ERRORS = (struct.error, ValueError, AssertionError, IndexError, TypeError, EOFError)


def _decode(decode: Callable[..., Any], data: Any, **kwargs: Any) -> Any:
    try:
        return decode(data, **kwargs)
    except _DECODE_ERRORS as exc:
        raise ProtocolError(f"malformed response field: {exc!r}") from None


def _reframe(parts: list[bytes | memoryview]) -> bytes:
    body = b"".join(parts)
    return _I32.pack(len(body)) + body


def _rewrite_whole(api_key: int, version: int, frame: memoryview, body_offset: int, rw: _Rewriter) -> bytes | None:
    response_cls = message_classes(api_key)[1]
    obj = _decode(response_cls.decode, frame[body_offset:], version=version)
    rw.visit(obj)
    if not rw.changed:
        return None
    flexible = response_cls.flexible_version_q(version)
    # Through the schema struct: kafka-python's decoded messages cannot re-encode themselves
    # (decode builds them without the header slot that ApiMessage.encode reads).
    body = response_cls._struct.encode(obj, version=version, compact=flexible, tagged=flexible)
    return _reframe([frame[4:body_offset], body])


def _rewrite_untagged(plan: _Plan, frame: memoryview, body_offset: int, rw: _Rewriter) -> bytes | None:
    found = _untagged_section(plan, frame, body_offset, 0, rw)
    if found is None:
        return None
    return _reframe([frame[4:body_offset], *found])


def _untagged_section(plan: _Plan, buf: memoryview, pos: int, first: int,
                      rw: _Rewriter) -> list[bytes | memoryview] | None:
    """``buf`` from ``pos``, where untagged top-level field ``first`` starts, to its end, with the
    endpoint fields' endpoints remapped, as parts; None if nothing changed."""
    walker = plan.walker
    bounds = walker.boundaries(buf, pos, upto=plan.untagged[-1] + 1, first=first)
    fields = plan.fields
    flexible = walker.flexible
    parts: list[bytes | memoryview] = []
    cursor = pos
    for index in plan.untagged:
        start, end = bounds[index - first], bounds[index - first + 1]
        field = fields[index]
        data = io.BytesIO(buf[start:end])
        value = _decode(field.decode, data, version=walker.version, compact=flexible, tagged=flexible)
        before = rw.changed
        rw.changed = False
        rw.visit(value)
        if rw.changed:
            parts.append(buf[cursor:start])
            parts.append(field.encode(value, version=walker.version, compact=flexible, tagged=flexible))
            cursor = end
        rw.changed = rw.changed or before
    if not rw.changed:
        return None
    parts.append(buf[cursor:])
    return parts


def _empty_tail(plan: _Plan, buf: Buffer, pos: int) -> bool:
    """Whether the one endpoint field starting at ``pos`` (a compact array) is empty or null: the
    usual case, decided by one byte with nothing copied."""
    return len(plan.untagged) == 1 and plan.walker.flexible and buf[pos] <= 1


def _tags_start(plan: _Plan, frame: memoryview, body_offset: int, on_records: OnRecords | None = None) -> int:
    assert plan.to_tags is not None
    start = plan.to_tags(frame, body_offset, on_records)
    if start >= len(frame):
        raise ProtocolError("response ends before its tagged fields")
    return start


def _rewrite_tagged(plan: _Plan, frame: memoryview, start: int, rw: _Rewriter) -> bytes | None:
    found = _tag_section(plan, frame, start, rw)
    if found is None:
        return None
    section, end = found
    return _reframe([frame[4:start], *section, frame[end:]])


@dataclass(frozen=True, slots=True)
class _TaggedRewrite:
    """One tagged endpoint field's rewrite, kept by its bytes: an upstream that names its brokers in
    every response (Tansu's Fetch v16+ NodeEndpoints) repeats the same bytes, and decoding them with
    kafka-python's schema costs more than the rest of a response's walk. The rewrite holds as long as
    the mapper answers for its endpoints as it did (asked again each time: it also notes listeners)."""

    seen: tuple[BrokerAddress, ...]
    mapped: tuple[tuple[str, int], ...]
    rewritten: bytes | None   # None: every endpoint kept as it was

    @classmethod
    def of(cls, field: Any, version: int, value_bytes: bytes | memoryview, rw: _Rewriter) -> _TaggedRewrite:
        before, first, mapper = rw.changed, len(rw.seen), rw.mapper
        mapped: list[tuple[str, int]] = []

        def recorded(node: int, host: str, port: int) -> tuple[str, int]:
            mapped.append(mapper(node, host, port))
            return mapped[-1]

        rw.changed, rw.mapper = False, recorded
        try:
            value = _decode(field.decode, io.BytesIO(value_bytes), version=version, compact=True, tagged=True)
            rw.visit(value)
        finally:
            rw.mapper = mapper
        rewritten = field.encode(value, version=version, compact=True, tagged=True) if rw.changed else None
        rw.changed = rw.changed or before
        return cls(tuple(rw.seen[first:]), tuple(mapped), rewritten)

    def replay(self, rw: _Rewriter) -> bool:
        """Whether the mapper still answers as it did, so that `rewritten` holds (then `rw` has seen the
        endpoints, as a walk would have); when not, nothing of this replay is kept in `rw`."""
        first = len(rw.seen)
        for broker, was in zip(self.seen, self.mapped, strict=True):
            rw.seen.append(broker)
            if rw.mapper(broker.node_id, broker.host, broker.port) != was:
                del rw.seen[first:]
                return False
        rw.changed = rw.changed or self.rewritten is not None
        return True


_TAGGED: dict[tuple[int, int, bytes], _TaggedRewrite] = {}
_TAGGED_KEPT = 256   # distinct tagged sections remembered (cleared when full: a cluster names few brokers)


def _tag_section(plan: _Plan, frame: memoryview, start: int,
                 rw: _Rewriter) -> tuple[list[bytes | memoryview], int] | None:
    """The tag section at ``start`` rewritten, as parts, and where the original ended; None if unchanged."""
    walker = plan.walker
    entries, end = read_tagged_fields(frame, start)
    if not any(tag in plan.tagged for tag, _, _ in entries):
        return None  # the common case: no new-leader hints, nothing copied
    section: list[bytes | memoryview] = [write_uvarint(len(entries))]
    for tag, vstart, vend in entries:
        value_bytes: bytes | memoryview = frame[vstart:vend]
        field = plan.tagged.get(tag)
        if field is not None:
            key = (id(plan), tag, bytes(value_bytes))
            memo = _TAGGED.get(key)
            if memo is None or not memo.replay(rw):
                memo = _TaggedRewrite.of(field, walker.version, value_bytes, rw)
                if len(_TAGGED) >= _TAGGED_KEPT:
                    _TAGGED.clear()
                _TAGGED[key] = memo
            if memo.rewritten is not None:
                value_bytes = memo.rewritten
        section += [write_uvarint(tag), write_uvarint(len(value_bytes)), value_bytes]
    if not rw.changed:
        return None
    return section, end


def rewrite_addresses(
    api_key: int, api_version: int, frame: memoryview, body_offset: int, mapper: AddressMapper,
    on_records: OnRecords | None = None,
) -> tuple[bytes | None, list[BrokerAddress]]:
    """Remap every endpoint in a response frame.

    Returns ``(new_frame, seen)``: ``new_frame`` is the whole re-sized frame, or None when the
    response carried no endpoint or the mapper kept every one as it was (forward the original);
    ``seen`` lists the upstream endpoints found, before mapping (node id, host, port). Entries
    with a negative node id or an error code (FindCoordinator failures) are left untouched.
    ``on_records`` receives every ``records`` field the walk to the tag section passes (Fetch
    v16+), so a caller that also counts records walks the response once, not twice.
    """
    plan = _PLANS.get((api_key, api_version))
    if plan is None:
        return None, []
    if plan.tagged and not plan.untagged:  # Produce v10+, Fetch v16+: checked on every response
        start = _tags_start(plan, frame, body_offset, on_records)
        if frame[start] == 0:
            return None, []  # no tagged fields at all: the usual case, nothing decoded or copied
    if plan.to_tail is not None:   # ShareFetch: endpoints behind the records
        start = plan.to_tail(frame, body_offset, on_records)
        if start >= len(frame):
            raise ProtocolError("response ends before its node endpoints")
        if _empty_tail(plan, frame, start):
            return None, []
        rw = _Rewriter(mapper, api_version)
        found = _untagged_section(plan, frame, start, plan.untagged[0], rw)
        return (None if found is None else _reframe([frame[4:start], *found])), rw.seen
    rw = _Rewriter(mapper, api_version)
    if plan.whole:
        return _rewrite_whole(api_key, api_version, frame, body_offset, rw), rw.seen
    if plan.tagged and not plan.untagged:   # the walk above found the section: the records are walked once
        return _rewrite_tagged(plan, frame, start, rw), rw.seen
    new = _rewrite_untagged(plan, frame, body_offset, rw)
    if plan.tagged:
        view = memoryview(new) if new is not None else frame
        new = _rewrite_tagged(plan, view, _tags_start(plan, view, body_offset), rw) or new
    return new, rw.seen


def rewrite_addresses_parts(
    api_key: int, api_version: int, parts: Parts, body_offset: int, mapper: AddressMapper,
    counts: RecordSink | None = None,
) -> tuple[Parts | None, list[BrokerAddress]]:
    """:func:`rewrite_addresses` for a response frame given as the parts it arrived in (size prefix
    included, the body at ``body_offset``).

    Returns ``(new_parts, seen)``: ``new_parts`` is the rewritten frame as parts to write in order,
    or None when nothing changed (forward ``parts`` as they are). For Produce v10+ and Fetch v16+
    no record data is copied, whether or not the NodeEndpoints tag is there: the walk to the tag
    section skips it across the parts, and ``counts`` (a ``RecordCounts``) receives every records
    field it passes, so a caller that also counts records walks the response once. A frame in one
    part is handled exactly as ``rewrite_addresses`` handles it.
    """
    if len(parts) == 1:
        frame = memoryview(parts[0])
        new, seen = rewrite_addresses(api_key, api_version, frame, body_offset, mapper,
                                      None if counts is None else counts.add_from)
        return (None if new is None else (new,)), seen
    plan = _PLANS.get((api_key, api_version))
    if plan is None:
        return None, []
    if plan.to_tail_parts is not None:
        return _rewrite_tail_parts(plan, SplitFrame(parts), body_offset, mapper, counts, api_version)
    if plan.to_tags_parts is None or plan.untagged:
        # Metadata, FindCoordinator, DescribeCluster, DescribeQuorum: no record data to spare.
        new, seen = rewrite_addresses(api_key, api_version, memoryview(b"".join(parts)), body_offset, mapper)
        return (None if new is None else (new,)), seen
    split = SplitFrame(parts)
    start = plan.to_tags_parts(split, body_offset, counts)
    if start >= split.total:
        raise ProtocolError("response ends before its tagged fields")
    buf, base = split.window(start, 1)
    if buf[start - base] == 0:
        return None, []  # no tagged fields at all: the usual case, nothing decoded or copied
    tail = memoryview(split.copy(start, split.total))  # the tag section, which ends the frame
    rw = _Rewriter(mapper, api_version)
    found = _tag_section(plan, tail, 0, rw)
    if found is None:
        return None, rw.seen
    section, end = found
    size = start - 4 + sum(map(len, section)) + len(tail) - end
    return (_I32.pack(size), *split.views(4, start), *section, tail[end:]), rw.seen


def _rewrite_tail_parts(plan: _Plan, split: SplitFrame, body_offset: int, mapper: AddressMapper,
                        counts: RecordSink | None, version: int) -> tuple[Parts | None, list[BrokerAddress]]:
    """Endpoints behind records in a split frame: walked to across the parts (records counted on the
    way), the small tail from there copied only when it holds one."""
    assert plan.to_tail_parts is not None
    start = plan.to_tail_parts(split, body_offset, counts)
    if start >= split.total:
        raise ProtocolError("response ends before its node endpoints")
    buf, base = split.window(start, 1)
    if _empty_tail(plan, buf, start - base):
        return None, []
    tail = memoryview(split.copy(start, split.total))
    rw = _Rewriter(mapper, version)
    found = _untagged_section(plan, tail, 0, plan.untagged[0], rw)
    if found is None:
        return None, rw.seen
    size = start - 4 + sum(map(len, found))
    return (_I32.pack(size), *split.views(4, start), *found), rw.seen
