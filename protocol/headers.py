"""Request and response headers: the part of every frame kqp always reads.

A request header (Kafka's ``RequestHeader.json``) is api key, api version, correlation id and a
nullable int16-length client id (header v1), plus a tagged-fields section in header v2 (flexible
request versions). The client id stays a classic int16 string even in v2, so that any broker can
read it before knowing the version. A response header is the correlation id (v0), plus tagged
fields in v1. Which header version a frame uses comes from :mod:`kqp.protocol.apis`.

These run once per frame in each direction, so they are plain ``struct`` reads at fixed offsets on
the frame memoryview (offsets count the 4-byte size prefix, so callers never re-slice), with no
kafka-python object built. Encoding is only for frames kqp makes itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .apis import (
    API_VERSIONS_KEY,
    decodable_range,
    kqp_ranges,
    request_header_version,
    response_header_version,
)
from .errors import ProtocolError, UnsupportedApi
from .walker import skip_tagged_fields

__all__ = [
    "RequestHeader",
    "encode_request_header",
    "encode_response_header",
    "parse_request_header",
    "response_body_offset",
    "response_correlation_id",
]

_KEY_VERSION_CORR = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# 4 (size) + 2 (api key) + 2 (api version) + 4 (correlation id) + 2 (client id length)
_MIN_REQUEST_FRAME = 14


@dataclass(slots=True, frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # offset in the frame (counting the 4-byte size prefix) where the body starts


# One dict probe per frame instead of a range check plus a flexible-version check.
_REQUEST_HEADER_VERSIONS: dict[tuple[int, int], int] = {
    (k, v): request_header_version(k, v) for k, (lo, hi) in kqp_ranges().items() for v in range(lo, hi + 1)
}


def _header_version_for(api_key: int, api_version: int) -> int:
    known = _REQUEST_HEADER_VERSIONS.get((api_key, api_version))
    if known is not None:
        return known
    rng = decodable_range(api_key)
    if rng is None:
        raise UnsupportedApi(f"unknown api key {api_key}")
    if rng[0] <= api_version <= rng[1]:
        return request_header_version(api_key, api_version)
    if api_key == API_VERSIONS_KEY and api_version > rng[1]:
        # A client newer than kqp: Kafka still reads the header (v2 from ApiVersions v3 on, when
        # the request became flexible) so it can answer UNSUPPORTED_VERSION with its own range.
        return 2 if api_version >= 3 else 1
    raise UnsupportedApi(f"api key {api_key} version {api_version} is outside kqp's range {rng}")


def parse_request_header(frame: memoryview) -> RequestHeader:
    """Parse the header of a whole request frame (size prefix included)."""
    n = len(frame)
    if n < _MIN_REQUEST_FRAME:
        raise ProtocolError(f"request frame of {n} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _KEY_VERSION_CORR.unpack_from(frame, 4)
    header_version = _header_version_for(api_key, api_version)
    (length,) = _I16.unpack_from(frame, 12)
    pos = 14
    if length < 0:
        if length != -1:
            raise ProtocolError(f"invalid client id length {length}")
        client_id = None
    else:
        end = pos + length
        if end > n:
            raise ProtocolError("client id runs past the end of the frame")
        client_id = str(frame[pos:end], "utf-8", "replace")
        pos = end
    if header_version == 2:
        try:
            pos = skip_tagged_fields(frame, pos)
        except IndexError:
            raise ProtocolError("request header tagged fields are truncated") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def response_correlation_id(frame: memoryview) -> int:
    """The correlation id of a whole response frame."""
    if len(frame) < 8:
        raise ProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
    return _I32.unpack_from(frame, 4)[0]


def response_body_offset(api_key: int, api_version: int, frame: memoryview) -> int:
    """Offset in the frame where the response body starts (after header v0 or v1)."""
    if len(frame) < 8:
        raise ProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
    if response_header_version(api_key, api_version) == 0:
        return 8
    try:
        return skip_tagged_fields(frame, 8)
    except IndexError:
        raise ProtocolError("response header tagged fields are truncated") from None


def encode_request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """A request header (no size prefix) in the header version the api/version calls for."""
    header_version = _header_version_for(api_key, api_version)
    head = _KEY_VERSION_CORR.pack(api_key, api_version, correlation_id)
    if client_id is None:
        cid = _I16.pack(-1)
    else:
        raw = client_id.encode("utf-8")
        cid = _I16.pack(len(raw)) + raw
    return head + cid + (b"\x00" if header_version == 2 else b"")


def encode_response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    """A response header (no size prefix): correlation id, plus empty tagged fields in v1."""
    head = _I32.pack(correlation_id)
    return head + b"\x00" if response_header_version(api_key, api_version) == 1 else head
