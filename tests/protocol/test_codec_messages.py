"""kqp's own requests to upstreams and the small response decodes."""

from __future__ import annotations

import pytest
from codec_support import recorded_frames
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from kqp.protocol.addresses import BrokerAddress
from kqp.protocol.apis import ApiKey
from kqp.protocol.errors import ProtocolError, UnsupportedApi
from kqp.protocol.headers import parse_request_header
from kqp.protocol.messages import decode_response, encode_request, metadata_brokers


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_request_every_version(version: int) -> None:
    frame = memoryview(encode_request(3, version, 17, "kqp", topics=None if version >= 1 else []))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, version, 17, "kqp")
    decoded = MetadataRequest.decode(frame[header.body_offset :], version=version)
    assert decoded.topics == (None if version >= 1 else [])


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_request_every_version(version: int) -> None:
    fields = {"client_software_name": "kqp", "client_software_version": "0.1"} if version >= 3 else {}
    frame = memoryview(encode_request(18, version, 1, "kqp", **fields))
    header = parse_request_header(frame)
    decoded = ApiVersionsRequest.decode(frame[header.body_offset :], version=version)
    if version >= 3:
        assert decoded.client_software_name == "kqp"


def test_versions_kqp_cannot_encode() -> None:
    with pytest.raises(UnsupportedApi):
        encode_request(3, 99, 1, "kqp")
    with pytest.raises(UnsupportedApi):
        encode_request(4, 0, 1, "kqp")


def test_decode_recorded_responses() -> None:
    decoded = 0
    for name, api_key, version, frame in recorded_frames():
        if api_key == ApiKey.ApiVersions:
            continue  # kqp reads ApiVersions answers with its probe (test_codec_api_versions)
        response = decode_response(api_key, version, frame)
        assert type(response).__name__.startswith(name.split("-")[1]), name
        decoded += 1
    assert decoded >= 20


def test_metadata_brokers_from_both_upstreams() -> None:
    frames = {n: (v, f) for n, k, v, f in recorded_frames() if k == 3}
    version, frame = frames["tansu-Metadata-v12.bin"]
    (tansu,) = metadata_brokers(frame, version)
    assert tansu.node_id == 111 and tansu.host == "127.0.0.1"
    version, frame = frames["mock-Metadata-v1.bin"]
    brokers = metadata_brokers(frame, version)
    assert [b.node_id for b in brokers] == [1, 2, 3] and all(isinstance(b, BrokerAddress) for b in brokers)


def test_truncated_response_is_a_protocol_error() -> None:
    (frame,) = [f for n, _, _, f in recorded_frames() if n == "tansu-Metadata-v12.bin"]
    with pytest.raises(ProtocolError):
        decode_response(3, 12, frame[:30])
