"""Request and response headers at every api and version, checked against kafka-python's encoding."""

from __future__ import annotations

import struct

import pytest
from codec_support import sample_message
from hypothesis import given, settings
from hypothesis import strategies as st

from kqp.protocol.apis import kqp_ranges, message_classes, request_header_version, response_header_version
from kqp.protocol.errors import ProtocolError, UnsupportedApi
from kqp.protocol.headers import (
    RequestHeader,
    encode_request_header,
    encode_response_header,
    parse_request_header,
    response_body_offset,
    response_correlation_id,
)

ALL_VERSIONS = [(k, v) for k, (lo, hi) in kqp_ranges().items() for v in range(lo, hi + 1)]


def kafka_python_request(api_key: int, version: int, client_id: str = "my-client") -> bytes:
    request = sample_message(message_classes(api_key)[0], version)
    request.with_header(correlation_id=1234, client_id=client_id)
    return request.encode(version=version, header=True, framed=True)


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_request_header_of_every_api_and_version(api_key: int, version: int) -> None:
    frame = memoryview(kafka_python_request(api_key, version))
    header = parse_request_header(frame)
    assert header == RequestHeader(api_key, version, 1234, "my-client", header.body_offset)
    # the body starts exactly where kafka-python's body does
    request_cls = message_classes(api_key)[0]
    assert request_cls.decode(frame[header.body_offset :], version=version) == sample_message(request_cls, version)
    # and kqp's encoder writes the same header bytes kafka-python does
    assert encode_request_header(api_key, version, 1234, "my-client") == bytes(frame[4 : header.body_offset])
    expected = 2 if request_cls.flexible_version_q(version) else 1
    assert request_header_version(api_key, version) == expected


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_response_header_of_every_api_and_version(api_key: int, version: int) -> None:
    response = sample_message(message_classes(api_key)[1], version)
    response.with_header(correlation_id=-7)
    # (no version= here: kafka-python would try to set it on the ResponseHeader and fail)
    frame = memoryview(response.encode(header=True, framed=True))
    offset = response_body_offset(api_key, version, frame)
    assert response_correlation_id(frame) == -7
    assert encode_response_header(api_key, version, -7) == bytes(frame[4:offset])
    assert message_classes(api_key)[1].decode(frame[offset:], version=version) == response
    flexible = message_classes(api_key)[1].flexible_version_q(version)
    assert response_header_version(api_key, version) == (1 if flexible and api_key != 18 else 0)


def test_api_versions_response_header_is_always_v0() -> None:
    assert encode_response_header(18, 4, 5) == struct.pack(">i", 5)
    assert encode_response_header(3, 12, 5) == struct.pack(">i", 5) + b"\x00"


def test_null_and_non_utf8_client_ids() -> None:
    null = struct.pack(">ihhih", 0, 3, 1, 9, -1)
    assert parse_request_header(memoryview(null)).client_id is None
    assert encode_request_header(3, 1, 9, None) == null[4:]
    bad = struct.pack(">ihhih", 0, 3, 1, 9, 2) + b"\xff\xfe"
    header = parse_request_header(memoryview(bad))
    assert header.client_id == "\ufffd\ufffd" and header.body_offset == len(bad)


def test_header_v2_tagged_fields_are_skipped() -> None:
    # Metadata v12 is flexible: header v2; one tagged field (tag 5, 3 bytes) before the body.
    frame = struct.pack(">ihhih", 0, 3, 12, 1, 1) + b"c" + b"\x01\x05\x03abc" + b"BODY"
    header = parse_request_header(memoryview(frame))
    assert frame[header.body_offset :] == b"BODY"


def test_response_header_v1_tagged_fields_are_skipped() -> None:
    frame = memoryview(struct.pack(">ii", 0, 77) + b"\x02\x00\x01z\x01\x00" + b"BODY")
    assert bytes(frame[response_body_offset(3, 12, frame) :]) == b"BODY"
    assert response_body_offset(3, 8, frame) == 8


@pytest.mark.parametrize(("version", "header_version"), [(5, 2), (9, 2), (32767, 2)])
def test_api_versions_above_kqp_max_still_parse(version: int, header_version: int) -> None:
    header = encode_request_header(18, version, 3, "newer-client")
    frame = memoryview(struct.pack(">i", len(header)) + header)
    parsed = parse_request_header(frame)
    assert (parsed.api_version, parsed.client_id, parsed.body_offset) == (version, "newer-client", len(frame))
    assert header.endswith(b"\x00") == (header_version == 2)


@pytest.mark.parametrize(
    ("api_key", "version"),
    # unknown key, controller-only Vote, below a body-read API's range (CreateTopics v0), an API naming
    # brokers with no schema (ShareFetch), above range, negative versions
    [(1000, 0), (52, 0), (-1, 0), (19, 0), (78, 0), (0, 99), (3, -1), (18, -1)],
)
def test_unsupported_apis_and_versions(api_key: int, version: int) -> None:
    frame = memoryview(struct.pack(">ihhih", 0, api_key, version, 1, -1))
    with pytest.raises(UnsupportedApi):
        parse_request_header(frame)


@pytest.mark.parametrize(
    ("api_key", "version", "tagged"),
    # Header-only: ListOffsets v0 (dropped by Kafka 4), LeaderAndIsr v4 and GetTelemetrySubscriptions
    # v0 (no schema in kafka-python: flexible from v4 and v0 by Kafka 3.9's definitions).
    [(2, 0, False), (4, 3, False), (4, 4, True), (71, 0, True)],
)
def test_header_only_requests_parse_with_their_header_version(api_key: int, version: int, tagged: bool) -> None:
    head = struct.pack(">hhih", api_key, version, 9, 2) + b"id" + (b"\x00" if tagged else b"")
    frame = memoryview(struct.pack(">i", len(head) + 3) + head + b"xyz")
    parsed = parse_request_header(frame)
    assert (parsed.api_key, parsed.api_version, parsed.correlation_id, parsed.client_id) == (api_key, version, 9, "id")
    assert parsed.body_offset == 4 + len(head)
    response = memoryview(struct.pack(">ii", 5 + tagged, 9) + b"\x00" * (1 + tagged))
    assert response_body_offset(api_key, version, response) == 8 + tagged


@pytest.mark.parametrize(("api_key", "version"), [(3, 1), (3, 12), (18, 3)])
def test_every_truncation_is_a_protocol_error(api_key: int, version: int) -> None:
    whole = kafka_python_request(api_key, version)
    body_offset = parse_request_header(memoryview(whole)).body_offset
    for cut in range(body_offset):
        with pytest.raises(ProtocolError):
            parse_request_header(memoryview(whole[:cut]))


def test_response_frames_too_short() -> None:
    with pytest.raises(ProtocolError):
        response_correlation_id(memoryview(b"\x00\x00\x00\x01"))
    with pytest.raises(ProtocolError):
        response_body_offset(3, 12, memoryview(struct.pack(">ii", 4, 1)))  # tagged fields missing


KEYS = st.sampled_from([0, 1, 3, 10, 18, 60, 4, 1000])


@settings(max_examples=500, deadline=None)
@given(api_key=KEYS, version=st.integers(min_value=-2, max_value=20), rest=st.binary(max_size=40))
def test_fuzzed_request_headers_raise_only_protocol_errors(api_key: int, version: int, rest: bytes) -> None:
    frame = memoryview(struct.pack(">ihhi", 0, api_key, version, 1) + rest)
    try:
        header = parse_request_header(frame)
    except ProtocolError:
        return
    assert 14 <= header.body_offset <= len(frame)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=60))
def test_fuzzed_raw_bytes_raise_only_protocol_errors(data: bytes) -> None:
    try:
        parse_request_header(memoryview(data))
    except ProtocolError:
        pass
