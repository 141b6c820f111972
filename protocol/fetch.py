"""What kqp reads and rewrites in Fetch and ShareFetch: max_bytes, record counts, throttled answers.

Three broker behaviours, each from Apache Kafka's handling of Fetch, which its handling of a share
group's ShareFetch (KIP-932) repeats: the cap of a consumer's ``max_bytes`` at what its quota allows
in one span (``KafkaApis.handleFetchRequest``, ``handleFetchFromShareFetchRequest``; partition
limits and a follower's fetch are left alone), record and batch counts of a response (one walk by
the response's schema, each ``records`` field handed to :meth:`RecordCounts.add_from`), and a
throttled fetch answered empty (KIP-219, ``FetchContext.getThrottledResponse``,
``ShareFetchContext.throttleResponse``; see ``empty_fetch_response`` for what is kept and why).

All of it runs per Fetch, so it reads the body in place and only builds bytes when it rewrites.
Responses are read as the parts they arrived in (a Fetch response of a few MB spans many reads):
record data is skipped across parts and never joined.
"""

from __future__ import annotations

import struct

from kafka.protocol.consumer.fetch import FetchResponse

from .apis import ApiKey, message_classes
from .parts import Parts, SplitFrame
from .records import BodyError, RecordCounts, count_body_records, count_body_records_parts
from .walker import Buffer, MessageWalker, schema_versions, walker_for

__all__ = [
    "FETCH_REQUEST_VERSIONS",
    "FETCH_RESPONSE_VERSIONS",
    "cap_fetch_max_bytes",
    "cap_share_fetch_max_bytes",
    "empty_fetch_response",
    "empty_share_fetch_response",
    "fetch_max_bytes",
    "fetch_response_counts",
    "fetch_response_counts_parts",
    "fetch_session_id",
    "share_fetch_response_counts_parts",
]

_REQUEST = "FetchRequest"
_RESPONSE = "FetchResponse"
_SHARE_REQUEST = "ShareFetchRequest"
_SHARE_RESPONSE = "ShareFetchResponse"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

FETCH_REQUEST_VERSIONS: range = schema_versions(_REQUEST)
FETCH_RESPONSE_VERSIONS: range = schema_versions(_RESPONSE)
_RESPONSE_WALKERS: dict[int, MessageWalker] = {v: walker_for(_RESPONSE, v) for v in FETCH_RESPONSE_VERSIONS}
# Built once: every Fetch request is read through one of these (a schema lookup per read cost more
# than the read).
_WALKERS: dict[str, dict[int, MessageWalker]] = {
    _REQUEST: {v: walker_for(_REQUEST, v) for v in FETCH_REQUEST_VERSIONS}, _RESPONSE: _RESPONSE_WALKERS,
    **{m: {v: walker_for(m, v) for v in schema_versions(m)} for m in (_SHARE_REQUEST, _SHARE_RESPONSE)}}


def _walker(message: str, version: int) -> MessageWalker:
    walker = _WALKERS[message].get(version)
    if walker is None:
        raise BodyError(f"{message} has no version {version}")
    return walker


def _field_start(message: str, version: int, field: str, body: Buffer) -> int | None:
    """Offset in ``body`` of a top-level field, or None when the version does not have it."""
    walker = _walker(message, version)
    if field not in walker.names:
        return None
    return walker.field_start(body, 0, walker.index(field))


def _read_i32(message: str, version: int, field: str, body: Buffer) -> tuple[int, int] | None:
    """(value, offset) of a top-level int32 field, or None when the version lacks it."""
    pos = _field_start(message, version, field, body)
    if pos is None:
        return None
    if pos + 4 > len(body):
        raise BodyError(f"{message} body truncated before {field}")
    return _I32.unpack_from(body, pos)[0], pos


def fetch_max_bytes(api_version: int, body: Buffer) -> int | None:
    """The request-level max_bytes (v3+, KIP-74), None for versions without one."""
    found = _read_i32(_REQUEST, api_version, "MaxBytes", body)
    return None if found is None else found[0]


def cap_fetch_max_bytes(api_version: int, body: Buffer, cap: int) -> bytes | None:
    """A copy of the request body with max_bytes lowered to ``cap``, or None if nothing changes.

    None when max_bytes is already at or below the cap, when the version has no max_bytes (v0-2:
    the broker caps those internally, but there is no field for a proxy to lower), or when the
    fetch comes from a follower (replica id >= 0, v0-14; from v15 the replica id is a tagged
    field, and followers do not connect through kqp).
    """
    return _cap_max_bytes(_REQUEST, api_version, body, cap)


def cap_share_fetch_max_bytes(api_version: int, body: Buffer, cap: int) -> bytes | None:
    """:func:`cap_fetch_max_bytes` for a ShareFetch request (every version has max_bytes and min_bytes;
    its ``MaxRecords`` and ``BatchSize`` bound a response too, and are left as asked)."""
    return _cap_max_bytes(_SHARE_REQUEST, api_version, body, cap)


def _cap_max_bytes(message: str, api_version: int, body: Buffer, cap: int) -> bytes | None:
    if cap < 0:
        raise ValueError(f"fetch cap must be >= 0, got {cap}")
    found = _read_i32(message, api_version, "MaxBytes", body)
    if found is None:
        return None
    max_bytes, max_pos = found
    if max_bytes <= cap:
        return None
    replica = _read_i32(message, api_version, "ReplicaId", body)   # Fetch v0-v14 (ShareFetch has none)
    if replica is not None and replica[0] >= 0:
        return None
    min_found = _read_i32(message, api_version, "MinBytes", body)
    patched = bytearray(body)
    _I32.pack_into(patched, max_pos, cap)
    if min_found is not None and min_found[0] > cap:
        _I32.pack_into(patched, min_found[1], cap)
    return bytes(patched)


def fetch_response_counts(api_version: int, body: Buffer) -> RecordCounts:
    """Records and record batches across every partition of a Fetch response."""
    return count_body_records(_RESPONSE_WALKERS, _RESPONSE, api_version, body)


def fetch_response_counts_parts(api_version: int, parts: Parts, body_offset: int) -> RecordCounts:
    """:func:`fetch_response_counts` of a whole response frame given as the parts it arrived in (size
    prefix included; the body starts at ``body_offset``). No record data is copied; a frame in one
    part is walked in place exactly as ``fetch_response_counts`` walks it."""
    if len(parts) == 1:
        return count_body_records(_RESPONSE_WALKERS, _RESPONSE, api_version, memoryview(parts[0])[body_offset:])
    return count_body_records_parts(_RESPONSE_WALKERS, _RESPONSE, api_version, SplitFrame(parts), body_offset)


def share_fetch_response_counts_parts(api_version: int, parts: Parts, body_offset: int) -> RecordCounts:
    """:func:`fetch_response_counts_parts` of a ShareFetch response frame."""
    walkers = _WALKERS[_SHARE_RESPONSE]
    if len(parts) == 1:
        return count_body_records(walkers, _SHARE_RESPONSE, api_version, memoryview(parts[0])[body_offset:])
    return count_body_records_parts(walkers, _SHARE_RESPONSE, api_version, SplitFrame(parts), body_offset)


def _read_parts(frame: SplitFrame, version: int, field: str, body_offset: int, unpack: struct.Struct,
                message: str = _RESPONSE) -> int:
    """A top-level fixed-size field of a response that has it, read across parts if need be."""
    walker = _walker(message, version)
    pos = walker.prefix_parts(walker.index(field))(frame, body_offset)
    if pos + unpack.size > frame.total:
        raise BodyError(f"{message} body truncated before {field}")
    buf, start = frame.window(pos, unpack.size)
    return unpack.unpack_from(buf, pos - start)[0]


def fetch_session_id(api_version: int, parts: Parts, body_offset: int) -> int:
    """The session id a Fetch response names (v7+, KIP-227: the one a full fetch opened), else 0;
    read across parts, nothing else of the body."""
    if api_version not in _RESPONSE_WALKERS:
        raise BodyError(f"{_RESPONSE} has no version {api_version}")
    if "SessionId" not in _RESPONSE_WALKERS[api_version].names:
        return 0
    return _read_parts(SplitFrame(parts), api_version, "SessionId", body_offset, _I32)


def empty_fetch_response(api_version: int, parts: Parts, body_offset: int, throttle_ms: int) -> bytes:
    """The KIP-219 throttled answer to a Fetch whose upstream response frame is ``parts`` (the frame
    as it arrived, size prefix included, its body at ``body_offset``): a whole frame with the
    upstream's response header and an empty body.

    The broker's throttled response (FetchContext.getThrottledResponse) carries the throttle
    time, no partitions, error NONE and the fetch session id: INVALID_SESSION_ID (0) for full and
    sessionless fetches, the session's own id for incremental ones (or
    INVALID_FETCH_SESSION_EPOCH when the epoch raced). The broker builds it *instead of*
    touching the session; kqp builds it *after* the upstream has answered and updated its
    session, so it keeps the upstream's error_code and session_id: a full fetch that created
    session N on the upstream must tell the client N, or the client would keep opening sessions
    the upstream then holds for nothing. With no partition data, NodeEndpoints (v16+) is empty.
    Only the header and the few bytes before ``responses`` are read: nothing of the records.
    """
    if api_version not in _RESPONSE_WALKERS:
        raise BodyError(f"{_RESPONSE} has no version {api_version}")
    frame = SplitFrame(parts)
    if body_offset > frame.total:
        raise BodyError(f"{_RESPONSE} frame ends inside its header")
    error_code = 0
    session_id = 0
    if "SessionId" in _RESPONSE_WALKERS[api_version].names:  # ErrorCode and SessionId arrive together (v7+)
        session_id = _read_parts(frame, api_version, "SessionId", body_offset, _I32)
        error_code = _read_parts(frame, api_version, "ErrorCode", body_offset, _I16)
    response = FetchResponse(
        throttle_time_ms=throttle_ms, error_code=error_code, session_id=session_id, responses=[]
    )
    body = response.encode(version=api_version)
    header = frame.copy(4, body_offset)
    return b"".join((_I32.pack(len(header) + len(body)), header, body))


def empty_share_fetch_response(api_version: int, parts: Parts, body_offset: int, throttle_ms: int) -> bytes | None:
    """The KIP-219 throttled answer to a ShareFetch whose upstream response frame is ``parts``, as
    the broker writes it (``ShareFetchContext.throttleResponse``): the throttle, error NONE, no
    topics, no node endpoints, an acquisition lock timeout of 0. None when the upstream answered
    with a top-level error, which carries no records and must reach the client (the broker never
    throttles such an answer empty: it returns before fetching). As the broker's, the records the
    fetch acquired are not delivered: they go back to the group when their acquisition lock ends.
    """
    frame = SplitFrame(parts)
    if body_offset > frame.total:
        raise BodyError(f"{_SHARE_RESPONSE} frame ends inside its header")
    if _read_parts(frame, api_version, "ErrorCode", body_offset, _I16, _SHARE_RESPONSE):
        return None
    response_cls = message_classes(ApiKey.ShareFetch)[1]
    body = response_cls(version=api_version, throttle_time_ms=throttle_ms, error_code=0, error_message=None,
                        acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[]).encode(version=api_version)
    header = frame.copy(4, body_offset)
    return b"".join((_I32.pack(len(header) + len(body)), header, body))
