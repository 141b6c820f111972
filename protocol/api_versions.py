"""ApiVersions: answered by kqp itself, and asked of upstreams by one probe.

kqp advertises the intersection of what the upstream supports and what kqp can serve
(:mod:`kqp.protocol.advertised`), so it encodes the ApiVersions response itself. A client asking
above kqp's maximum gets what Kafka's broker sends: a v0 body with UNSUPPORTED_VERSION and kqp's
own range; the response header is always v0 (KIP-511). :func:`client_software` reads KIP-511's
client software name and version from v3+ requests, :func:`intended_broker` KIP-1242's cluster and
node from v5+ requests, which a broker that is not that node answers with REBOOTSTRAP_REQUIRED.

:class:`ApiVersionsProbe` learns an upstream's ranges by Kafka's client rule
(``NetworkClient.handleApiVersionsResponse``): an UNSUPPORTED_VERSION answer names the upstream's
own range and the probe asks again at the highest version both know, or at v0 when it names none.
An error answer is read as v0 only when that layout accounts for every byte, which also covers the
mock cluster's malformed answer and Tansu's (protocol/README.md, "Quirks of the test upstreams").
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from .apis import ApiKey, decodable_range, message_classes
from .errors import ProtocolError
from .walker import skip_tagged_fields, walker_for

__all__ = [
    "INVALID_REQUEST",
    "PROBE_VERSION",
    "REBOOTSTRAP_REQUIRED",
    "UNSUPPORTED_VERSION",
    "ApiVersionsProbe",
    "client_software",
    "decode_api_versions_response",
    "encode_api_versions_response",
    "intended_broker",
    "intersect_ranges",
    "readdressed",
]

UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
REBOOTSTRAP_REQUIRED = 129   # KIP-1242: the client has reached another cluster or node than it meant
#: The version kqp first asks upstreams with: v3 (Kafka 2.4+), the first flexible version. Not
#: kqp's highest: an upstream that, like Tansu, answers versions above its own in its own layout
#: with no error would be misread, and nothing kqp reads changed after v3.
PROBE_VERSION = 3
#: Sent at v3+: Kafka refuses a v3+ request with an empty software name (INVALID_REQUEST) and
#: otherwise only labels its connection metrics with these.
CLIENT_SOFTWARE = {"client_software_name": "kqp", "client_software_version": "0"}

#: KIP-511's pattern for client_software_name and _version (ApiVersionsRequest.isValid).
_KIP_511_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
SOFTWARE_NAME_MAX = 64

ApiVersionsRequest, ApiVersionsResponse = message_classes(ApiKey.ApiVersions)   # v5: kqp's definitions
_RANGE = decodable_range(ApiKey.ApiVersions)
assert _RANGE is not None
_MIN, _MAX = _RANGE
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


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
        lo, hi = ranges.get(ApiKey.ApiVersions, _RANGE)
        ranges = {ApiKey.ApiVersions: (max(lo, _MIN), min(hi, _MAX))}
    else:
        version = max(request_version, 0)
    body = _response_body(version, error_code, throttle_ms, tuple(sorted(ranges.items())))
    return _I32.pack(4 + len(body)) + _I32.pack(correlation_id) + body


@functools.lru_cache(maxsize=64)
def _response_body(version: int, error_code: int, throttle_ms: int, ranges: tuple[tuple[int, tuple[int, int]], ...]
                   ) -> bytes:
    """Every connection asks first, and the answer changes only with the ranges: encoding it through
    the schema was a tenth of a short-lived client's cost in kqp."""
    entry = ApiVersionsResponse.ApiVersion
    api_keys = [entry(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ranges]
    return ApiVersionsResponse(  # type: ignore[no-any-return]
        version=version, error_code=error_code, api_keys=api_keys, throttle_time_ms=throttle_ms
    ).encode(version=version)


def readdressed(frame: bytes, correlation_id: int) -> bytes:
    """An ApiVersions response frame answering the request `correlation_id` instead (its header is
    v0 whatever the version: the size prefix, then the correlation id)."""
    return frame[:4] + _I32.pack(correlation_id) + frame[8:]


def client_software(request_version: int, body: memoryview | bytes) -> tuple[str, str] | None:
    """KIP-511's (client_software_name, client_software_version) from an ApiVersions request body
    ("invalid" for a name KIP-511 forbids), or None: before v3 there are none, and a version kqp
    does not know or a body it cannot read names nobody (kqp answers it all the same)."""
    if not 3 <= request_version <= _MAX:
        return None
    decoded = _decoded(request_version, bytes(body))
    return None if decoded is None else decoded[0]


def intended_broker(request_version: int, body: memoryview | bytes) -> tuple[str | None, int] | None:
    """KIP-1242's ``(ClusterId, NodeId)`` of a v5+ ApiVersions request: the broker the client means to
    reach (``(None, -1)``: it names none). None before v5, or for a body kqp cannot read."""
    if not 5 <= request_version <= _MAX:
        return None
    decoded = _decoded(request_version, bytes(body))
    return None if decoded is None else decoded[1]


@functools.lru_cache(maxsize=256)
def _decoded(version: int, body: bytes) -> tuple[tuple[str, str], tuple[str | None, int]] | None:
    """The software and the intended broker of a v3+ request body, or None for one kqp cannot read.
    Every connection sends one, and a client's body is the same each time: decoded once."""
    try:
        decoded = ApiVersionsRequest.decode(body, version=version)
    except (struct.error, ValueError, AssertionError, IndexError, TypeError, EOFError):   # messages.DECODE_ERRORS
        return None
    software = (_software_name(decoded.client_software_name),   # type: ignore[attr-defined]
                _software_name(decoded.client_software_version))   # type: ignore[attr-defined]
    return software, (getattr(decoded, "cluster_id", None), getattr(decoded, "node_id", -1))


def _software_name(value: str | None) -> str:
    """KIP-511's rule for both names (a broker answers INVALID_REQUEST otherwise): "invalid" for a
    name that breaks it; at most SOFTWARE_NAME_MAX characters, as they label metrics."""
    if value is None or not _KIP_511_NAME.fullmatch(value):
        return "invalid"
    return value[:SOFTWARE_NAME_MAX]


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


def decode_api_versions_response(frame: memoryview, api_version: int) -> tuple[int, dict[int, tuple[int, int]]]:
    """``(error_code, ranges)`` from a whole upstream ApiVersions response frame.

    ``api_version`` is the version kqp asked with. A clean answer must be in that version's layout,
    every byte accounted for, or it is a :class:`ProtocolError`. An error answer is in the v0 layout
    (Kafka's broker writes it so whatever was asked); one that is not names no ranges (see the
    module docstring).
    """
    if len(frame) < 10:
        raise ProtocolError("ApiVersions response too short")
    body = frame[8:]  # header v0: size prefix and correlation id
    (error_code,) = _I16.unpack_from(body, 0)
    version = min(max(api_version, 0), _MAX) if error_code == 0 else 0
    if not _fits(body, version):
        if error_code == 0:
            raise ProtocolError(f"unreadable ApiVersions v{version} response ({len(body)} body bytes)")
        return error_code, {}
    decoded = ApiVersionsResponse.decode(body, version=version)
    if decoded.api_keys is None:   # a null array, which the schema reads though Kafka never writes one
        if error_code == 0:
            raise ProtocolError(f"ApiVersions v{version} response with a null api_keys array")
        return error_code, {}
    return error_code, {e.api_key: (e.min_version, e.max_version) for e in decoded.api_keys}


def _fits(body: memoryview, version: int) -> bool:
    walker = walker_for(ApiVersionsResponse, version)
    try:
        end = walker.tagged_start(body, 0)
        if walker.flexible:
            end = skip_tagged_fields(body, end)
    except (ProtocolError, IndexError):
        return False
    return end == len(body)


@dataclass(frozen=True, slots=True)
class ApiVersionsProbe:
    """kqp's ApiVersions exchange with one upstream, one immutable step at a time (no I/O here).

    Ask ApiVersions at ``version`` with ``request_fields``, give the answer to :meth:`answered`,
    and repeat with the step it returns until ``ranges`` is set::

        probe = ApiVersionsProbe()
        while probe.ranges is None:
            probe = probe.answered(<the answer to ApiVersions v{probe.version}, **probe.request_fields>)

    Each retry asks a lower version than the one before, so a probe ends after at most
    ``PROBE_VERSION + 1`` requests, with the upstream's ranges or a :class:`ProtocolError`.
    """

    version: int = PROBE_VERSION
    ranges: Mapping[int, tuple[int, int]] | None = None  # the upstream's ranges, once it has said them

    @property
    def request_fields(self) -> dict[str, str]:
        """The ApiVersions request body's fields at ``version``."""
        return dict(CLIENT_SOFTWARE) if self.version >= 3 else {}

    def answered(self, frame: memoryview) -> ApiVersionsProbe:
        """The next step after the upstream's whole answer ``frame`` to the request at ``version``.

        UNSUPPORTED_VERSION means ask again, at the upstream's highest ApiVersions version if the
        answer names it, else at v0 (Kafka's ``NetworkClient`` rule). Any other error, or a retry
        that would not go lower, is a :class:`ProtocolError`.
        """
        error, ranges = decode_api_versions_response(frame, self.version)
        if error == 0:
            return ApiVersionsProbe(self.version, ranges)
        if error != UNSUPPORTED_VERSION:
            raise ProtocolError(f"ApiVersions v{self.version} answered with error code {error}")
        theirs = ranges.get(ApiKey.ApiVersions)
        retry = 0 if theirs is None else min(theirs[1], _MAX)
        if not 0 <= retry < self.version:
            raise ProtocolError(f"ApiVersions v{self.version} is unsupported, and the upstream offers no lower version")
        return ApiVersionsProbe(retry)
