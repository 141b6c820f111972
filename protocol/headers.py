"""Request and response headers: the part of every frame kqp always reads.

A request header (Kafka's ``RequestHeader.json``) is api key, api version, correlation id and a
nullable int16-length client id (header v1), plus a tagged-fields section in header v2 (flexible
request versions). The client id stays a classic int16 string even in v2, so that any broker can
read it before knowing the version. A response header is the correlation id (v0), plus tagged
fields in v1. Which header version a frame uses comes from :mod:`kqp.protocol.apis`.

These run once per frame in each direction, so they are plain ``struct`` reads at fixed offsets on
the frame memoryview (offsets count the 4-byte size prefix, so callers never re-slice), with no
kafka-python object built, and every per-(api, version) decision is one probe of a table built
at import: the request's api key and version are read as one unsigned int32 that keys the table
directly, and the header is a named tuple built without a Python-level constructor call.
Encoding is only for frames kqp makes itself.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .advertised import header_only_pairs
from .apis import (
    ApiKey,
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
# api key and version as one unsigned int (the table key), correlation id, client id length
_REQUEST_HEAD = struct.Struct(">Iih").unpack_from
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_CORRELATION_ID = _I32.unpack_from

# 4 (size) + 2 (api key) + 2 (api version) + 4 (correlation id) + 2 (client id length)
_MIN_REQUEST_FRAME = 14


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # offset in the frame (counting the 4-byte size prefix) where the body starts


_new_header = tuple.__new__  # RequestHeader's own __new__ is a Python function; skip the call


def _key(api_key: int, api_version: int) -> int:
    return (api_key & 0xFFFF) << 16 | (api_version & 0xFFFF)


# Every (api key, version) kqp reads requests of: what it decodes, and what it forwards on its
# header alone (`kqp.protocol.advertised`).
_HANDLED = [*((k, v) for k, (lo, hi) in kqp_ranges().items() for v in range(lo, hi + 1)), *header_only_pairs()]
# (api key << 16 | version) -> (api key, version, header has tagged fields).
_REQUEST_LAYOUT: dict[int, tuple[int, int, bool]] = {
    _key(k, v): (k, v, request_header_version(k, v) == 2) for k, v in _HANDLED
}
_NEWEST: dict[int, int] = {}
for _k, _v in _HANDLED:
    _NEWEST[_k] = max(_v, _NEWEST.get(_k, _v))
# api key -> first version whose response header (v1) carries tagged fields; 1 << 15 for never.
_RESPONSE_TAGS_FROM: dict[int, int] = {
    k: next((v for v in range(hi + 1) if response_header_version(k, v) == 1), 1 << 15) for k, hi in _NEWEST.items()
}


def _header_version_for(api_key: int, api_version: int) -> int:
    rng = decodable_range(api_key)
    if rng is None:
        raise UnsupportedApi(f"unknown api key {api_key}")
    if rng[0] <= api_version <= rng[1]:
        return request_header_version(api_key, api_version)
    if api_key == ApiKey.ApiVersions and api_version > rng[1]:
        # A client newer than kqp: Kafka still reads the header (v2 from ApiVersions v3 on, when
        # the request became flexible) so it can answer UNSUPPORTED_VERSION with its own range.
        return 2 if api_version >= 3 else 1
    raise UnsupportedApi(f"api key {api_key} version {api_version} is outside kqp's range {rng}")


def _unlisted(frame: memoryview) -> tuple[int, int, bool]:
    """The slow path for a version outside the table: a newer ApiVersions, or an error."""
    api_key, api_version, _ = _KEY_VERSION_CORR.unpack_from(frame, 4)
    return api_key, api_version, _header_version_for(api_key, api_version) == 2


def parse_request_header(frame: memoryview) -> RequestHeader:
    """Parse the header of a whole request frame (size prefix included)."""
    n = len(frame)
    if n < _MIN_REQUEST_FRAME:
        raise ProtocolError(f"request frame of {n} bytes is shorter than a request header")
    key, correlation_id, length = _REQUEST_HEAD(frame, 4)
    layout = _REQUEST_LAYOUT.get(key)
    api_key, api_version, tagged = layout if layout is not None else _unlisted(frame)
    if length >= 0:
        pos = _MIN_REQUEST_FRAME + length
        if pos > n:
            raise ProtocolError("client id runs past the end of the frame")
        client_id: str | None = str(frame[_MIN_REQUEST_FRAME:pos], "utf-8", "replace")
    elif length == -1:
        client_id, pos = None, _MIN_REQUEST_FRAME
    else:
        raise ProtocolError(f"invalid client id length {length}")
    if tagged:
        if pos >= n:
            raise ProtocolError("request header tagged fields are truncated")
        if frame[pos] == 0:  # no tagged fields: the usual case
            pos += 1
        else:
            try:
                pos = skip_tagged_fields(frame, pos)
            except IndexError:
                raise ProtocolError("request header tagged fields are truncated") from None
    return _new_header(RequestHeader, (api_key, api_version, correlation_id, client_id, pos))


def response_correlation_id(frame: memoryview) -> int:
    """The correlation id of a whole response frame."""
    if len(frame) < 8:
        raise ProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
    return _CORRELATION_ID(frame, 4)[0]


def response_body_offset(api_key: int, api_version: int, frame: memoryview) -> int:
    """Offset in the frame where the response body starts (after header v0 or v1)."""
    n = len(frame)
    if n < 8:
        raise ProtocolError(f"response frame of {n} bytes has no correlation id")
    tags_from = _RESPONSE_TAGS_FROM.get(api_key)
    if tags_from is None:
        raise UnsupportedApi(f"unknown api key {api_key}")
    if api_version < tags_from:
        return 8
    if n > 8 and frame[8] == 0:
        return 9
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
