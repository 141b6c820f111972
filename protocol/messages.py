"""kqp's own requests to upstreams, and small decodes of their answers.

kqp talks to upstreams on its own behalf for a few control messages: ApiVersions (to learn the
ranges it intersects with its own), Metadata (to learn the upstream node ids and addresses it must
open listeners for) and whatever a later feature needs. Those messages are small and rare, so they
go through kafka-python's message classes; nothing on the forwarding path uses this module.

Frames are whole (size prefix included) in both directions, like everything else in
``kqp.protocol``. Headers are produced and skipped by :mod:`kqp.protocol.headers`, so kqp's own
frames follow exactly the same header-version rules as the frames it forwards.
"""

from __future__ import annotations

import struct
from typing import Any

from .addresses import BrokerAddress, rewrite_addresses
from .apis import ApiKey, decodable_range, message_classes
from .errors import ProtocolError, UnsupportedApi
from .headers import encode_request_header, encode_response_header, response_body_offset

__all__ = ["DECODE_ERRORS", "decode_body", "decode_response", "encode_request", "metadata_brokers",
           "metadata_cluster_id", "response_frame"]

_I32 = struct.Struct(">i")
# What kafka-python's decoders raise on a malformed body (UnicodeDecodeError is a ValueError).
DECODE_ERRORS = (struct.error, ValueError, AssertionError, IndexError, TypeError, EOFError)


def _check_version(api_key: int, api_version: int) -> None:
    rng = decodable_range(api_key)
    if rng is None or not rng[0] <= api_version <= rng[1]:
        raise UnsupportedApi(f"kqp cannot encode api key {api_key} version {api_version}")


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str, **fields: Any) -> bytes:
    """A whole request frame; ``fields`` are the request's fields by kafka-python's snake_case names.

    Fields left out take the schema's defaults (e.g. MetadataRequest ``topics=None`` asks for
    every topic, the default ``[]`` for none).
    """
    _check_version(api_key, api_version)
    request_cls = message_classes(api_key)[0]
    body = request_cls(version=api_version, **fields).encode(version=api_version)
    header = encode_request_header(api_key, api_version, correlation_id, client_id)
    return _I32.pack(len(header) + len(body)) + header + body


def decode_response(api_key: int, api_version: int, frame: memoryview) -> object:
    """The kafka-python response object for a whole response frame.

    ApiVersions answers are read by :class:`kqp.protocol.api_versions.ApiVersionsProbe`, which
    also knows the error answers' v0 layout and Kafka's retry rule.
    """
    _check_version(api_key, api_version)
    response_cls = message_classes(api_key)[1]
    offset = response_body_offset(api_key, api_version, frame)
    try:
        return response_cls.decode(frame[offset:], version=api_version)
    except DECODE_ERRORS as exc:
        raise ProtocolError(f"malformed api key {api_key} v{api_version} response: {exc!r}") from None


def decode_body(cls: type, version: int, body: memoryview | bytes) -> object:
    """A request or response body (no header) as kafka-python's `cls` at `version`."""
    if not 0 <= version <= cls.max_version:
        raise ProtocolError(f"{cls.__name__} has no version {version}")
    try:
        return cls.decode(bytes(body), version=version)
    except DECODE_ERRORS as exc:
        raise ProtocolError(f"malformed {cls.__name__} v{version}: {type(exc).__name__}") from None


def response_frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A whole response frame kqp answers itself: size, the version's response header, `body`."""
    head = encode_response_header(api_key, version, correlation_id)
    return _I32.pack(len(head) + len(body)) + head + body


def _keep(node_id: int, host: str, port: int) -> tuple[str, int]:
    return host, port


def metadata_brokers(frame: memoryview, api_version: int) -> list[BrokerAddress]:
    """The brokers of a whole Metadata response frame, without decoding its topics."""
    offset = response_body_offset(ApiKey.Metadata, api_version, frame)
    return rewrite_addresses(ApiKey.Metadata, api_version, frame, offset, _keep)[1]


def metadata_cluster_id(frame: memoryview, api_version: int) -> str | None:
    """The cluster id of a whole Metadata response frame (v2+; None before, or when the broker has none)."""
    return decode_response(ApiKey.Metadata, api_version, frame).cluster_id   # type: ignore[attr-defined]
