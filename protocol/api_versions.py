"""ApiVersions, answered by kqp itself and read leniently from upstreams.

kqp advertises to clients the intersection of what the upstream supports and what kqp can decode,
so it encodes the ApiVersions response itself (:func:`encode_api_versions_response`). A client
newer than kqp may ask with a version above kqp's maximum; kqp then answers as Kafka's broker
does (``RequestContext`` serialises it at v0): a v0 body with UNSUPPORTED_VERSION and kqp's own
ApiVersions range, so the client retries with a version both understand. The response header is
always v0 (KIP-511).

Reading upstream answers must survive two non-conforming implementations kqp is tested against:

* librdkafka's mock cluster supports ApiVersions v0-v2 only. Asked with v3+, it answers
  UNSUPPORTED_VERSION but writes the api-key count as one raw byte (neither Kafka's v0 int32 nor
  a compact N+1 varint), followed by its ApiVersions entry and a throttle time. kafka-python,
  which parses any error answer as v0, reads that byte and the next three as an int32 count and
  fails. :func:`decode_api_versions_response` tries the layouts a peer may have used and keeps
  the one that accounts for every byte, so kqp reads the mock's range (0-2) and can retry
  (:func:`api_versions_retry_version`).
* Tansu answers requests above its maximum with a normal v3-layout answer and error 0 instead of
  UNSUPPORTED_VERSION, and always sends every v3 tagged field (features, ZK-migration flag), which
  Debian's librdkafka 2.0.2 (kcat) fails to skip. kqp parses it fine, and clients never see it:
  kqp's own answer carries no tagged fields.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from kafka.protocol.metadata import ApiVersionsResponse

from .apis import API_VERSIONS_KEY, decodable_range
from .errors import ProtocolError
from .walker import read_uvarint, skip_tagged_fields, walker_for

__all__ = [
    "UNSUPPORTED_VERSION",
    "UPSTREAM_REQUEST_VERSION",
    "api_versions_retry_version",
    "decode_api_versions_response",
    "encode_api_versions_response",
    "intersect_ranges",
]

UNSUPPORTED_VERSION = 35
#: The version kqp first asks upstreams with: flexible (v3, Kafka 2.4+), understood by Kafka and
#: Tansu; the mock cluster answers it with UNSUPPORTED_VERSION and its range, and kqp retries.
UPSTREAM_REQUEST_VERSION = 3

_RANGE = decodable_range(API_VERSIONS_KEY)
assert _RANGE is not None
_MIN, _MAX = _RANGE
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ENTRY = struct.Struct(">hhh")


def encode_api_versions_response(
    request_version: int,
    correlation_id: int,
    ranges: Mapping[int, tuple[int, int]],
    error_code: int = 0,
    throttle_ms: int = 0,
) -> bytes:
    """A whole ApiVersions response frame (size prefix, header v0, body) for a client request."""
    if request_version > _MAX:
        version = 0
        error_code = UNSUPPORTED_VERSION
        # Kafka (KIP-511) lists only ApiVersions itself here: what the client may retry with.
        lo, hi = ranges.get(API_VERSIONS_KEY, _RANGE)
        ranges = {API_VERSIONS_KEY: (max(lo, _MIN), min(hi, _MAX))}
    else:
        version = max(request_version, 0)
    entry = ApiVersionsResponse.ApiVersion
    api_keys = [entry(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(ranges.items())]
    body = ApiVersionsResponse(
        version=version, error_code=error_code, api_keys=api_keys, throttle_time_ms=throttle_ms
    ).encode(version=version)
    return _I32.pack(4 + len(body)) + _I32.pack(correlation_id) + body


def intersect_ranges(
    upstream: Mapping[int, tuple[int, int]], ours: Mapping[int, tuple[int, int]]
) -> dict[int, tuple[int, int]]:
    """Per api key present on both sides, the overlap of the two ranges (empty overlaps dropped)."""
    out = {}
    for key in sorted(upstream.keys() & ours.keys()):
        lo = max(upstream[key][0], ours[key][0])
        hi = min(upstream[key][1], ours[key][1])
        if lo <= hi:
            out[key] = (lo, hi)
    return out


def _entries(body: memoryview, pos: int, count: int, flexible: bool) -> tuple[dict[int, tuple[int, int]], int]:
    ranges = {}
    for _ in range(count):
        key, lo, hi = _ENTRY.unpack_from(body, pos)
        pos += 6
        if flexible:
            pos = skip_tagged_fields(body, pos)
        ranges[key] = (lo, hi)
    return ranges, pos


def _layouts(body: memoryview) -> list[tuple[int, int, bool, bool]]:
    """Candidate readings of the api_keys array as (count, entries offset, flexible, tagged tail):
    Kafka's classic int32 count, Kafka's compact N+1 varint, the mock cluster's raw byte."""
    out = []
    if len(body) >= 6:
        out.append((_I32.unpack_from(body, 2)[0], 6, False, False))
    if len(body) >= 3:
        try:
            count, pos = read_uvarint(body, 2)
            out.append((count - 1, pos, True, True))
        except (IndexError, ProtocolError):
            pass
        out.append((body[2], 3, False, False))
    return out


def _lenient(body: memoryview) -> dict[int, tuple[int, int]] | None:
    for count, pos, flexible, tail_tags in _layouts(body):
        if count < 0 or count * 6 > len(body) - pos:
            continue
        try:
            ranges, pos = _entries(body, pos, count, flexible)
            rest = len(body) - pos
            if rest >= 4 and tail_tags:  # throttle_time_ms, then the top-level tagged fields
                pos = skip_tagged_fields(body, pos + 4)
                rest = len(body) - pos
        except (struct.error, IndexError, ProtocolError):
            continue
        if rest in (0, 4):  # nothing left, or just a throttle time
            return ranges
    return None


def decode_api_versions_response(frame: memoryview, api_version: int) -> tuple[int, dict[int, tuple[int, int]]]:
    """``(error_code, ranges)`` from a whole upstream ApiVersions response frame.

    ``api_version`` is the version kqp asked with. Conforming answers are read through
    kafka-python at that version (after checking, with the skip walker, that the layout accounts
    for every byte); anything else is read leniently (see the module docstring).
    """
    if len(frame) < 10:
        raise ProtocolError("ApiVersions response too short")
    body = frame[8:]  # header v0: size prefix and correlation id
    (error_code,) = _I16.unpack_from(body, 0)
    version = min(max(api_version, 0), _MAX)
    # kafka-python reads any error answer as v0; only trust it for clean answers.
    if error_code == 0 and _fits(body, version):
        decoded = ApiVersionsResponse.decode(body, version=version)
        return error_code, {e.api_key: (e.min_version, e.max_version) for e in decoded.api_keys}
    ranges = _lenient(body)
    if ranges is None:
        raise ProtocolError(f"unreadable ApiVersions response (error {error_code}, {len(body)} body bytes)")
    return error_code, ranges


def _fits(body: memoryview, version: int) -> bool:
    walker = walker_for(ApiVersionsResponse, version)
    try:
        end = walker.tagged_start(body, 0)
        if walker.flexible:
            end = skip_tagged_fields(body, end)
    except (ProtocolError, IndexError):
        return False
    return end == len(body)


def api_versions_retry_version(error_code: int, ranges: Mapping[int, tuple[int, int]], asked: int) -> int | None:
    """The ApiVersions version to ask again with after an UNSUPPORTED_VERSION answer, or None.

    The answer's own ApiVersions entry says what the upstream supports; kqp retries with the
    highest version both sides know, if that is below what it asked with.
    """
    if error_code != UNSUPPORTED_VERSION:
        return None
    theirs = ranges.get(API_VERSIONS_KEY)
    if theirs is None:
        return 0 if asked > 0 else None
    retry = min(theirs[1], _MAX)
    return retry if 0 <= retry < asked else None
