"""kqp's own ApiVersions answer, the above-max fallback, and lenient reading of upstream answers."""

from __future__ import annotations

import struct

import pytest
from codec_support import recorded_frames
from kafka.protocol.metadata import ApiVersionsResponse

from kqp.protocol.api_versions import (
    UNSUPPORTED_VERSION,
    UPSTREAM_REQUEST_VERSION,
    api_versions_retry_version,
    decode_api_versions_response,
    encode_api_versions_response,
    intersect_ranges,
)
from kqp.protocol.apis import decodable_range, kqp_ranges
from kqp.protocol.errors import ProtocolError
from kqp.protocol.headers import response_correlation_id

MAX = decodable_range(18)[1]
RANGES = {0: (3, 11), 1: (4, 16), 3: (0, 12), 18: (0, 4)}


@pytest.mark.parametrize("version", range(MAX + 1))
def test_encode_every_version_decodes_with_kafka_python(version: int) -> None:
    frame = encode_api_versions_response(version, 99, RANGES, throttle_ms=250)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert response_correlation_id(memoryview(frame)) == 99
    decoded = ApiVersionsResponse.decode(frame[8:], version=version)  # header v0 at every version
    assert decoded.error_code == 0
    assert {a.api_key: (a.min_version, a.max_version) for a in decoded.api_keys} == RANGES
    assert [a.api_key for a in decoded.api_keys] == sorted(RANGES)
    assert decoded.throttle_time_ms == (250 if version >= 1 else 0)
    assert decode_api_versions_response(memoryview(frame), version) == (0, RANGES)
    if version >= 3:
        assert frame.endswith(b"\x00")  # no tagged fields: nothing for old librdkafka to trip on


@pytest.mark.parametrize("version", [MAX + 1, 9, 32767])
def test_above_max_gets_kafkas_v0_unsupported_version_answer(version: int) -> None:
    frame = encode_api_versions_response(version, 5, RANGES, throttle_ms=10)
    body = frame[8:]
    # v0 body: error int16, int32 count, one (key, min, max) entry, no throttle, nothing else
    assert body == struct.pack(">hihhh", UNSUPPORTED_VERSION, 1, 18, 0, min(4, MAX))
    decoded = ApiVersionsResponse.decode(body, version=0)
    assert decoded.error_code == 35 and decoded.api_keys[0].api_key == 18
    error, ranges = decode_api_versions_response(memoryview(frame), version)
    assert (error, ranges) == (35, {18: (0, min(4, MAX))})
    assert api_versions_retry_version(error, ranges, version) == min(4, MAX)


def test_intersection() -> None:
    upstream = {0: (0, 9), 1: (0, 17), 3: (0, 12), 68: (0, 1), 2: (0, 0)}
    ours = {0: (3, 13), 1: (4, 18), 3: (0, 13), 2: (1, 11)}
    assert intersect_ranges(upstream, ours) == {0: (3, 9), 1: (4, 17), 3: (0, 12)}
    assert intersect_ranges({}, kqp_ranges()) == {}


def recorded(name: str) -> memoryview:
    return next(f for n, _, _, f in recorded_frames() if n == name)


@pytest.mark.parametrize("version", range(5))
def test_tansu_answers(version: int) -> None:
    error, ranges = decode_api_versions_response(recorded(f"tansu-ApiVersions-v{version}.bin"), version)
    assert error == 0 and ranges[18] == (0, 4) and ranges[0] == (0, 11) and len(ranges) == 36


@pytest.mark.parametrize("version", range(3))
def test_mock_cluster_answers_below_v3(version: int) -> None:
    error, ranges = decode_api_versions_response(recorded(f"mock-ApiVersions-v{version}.bin"), version)
    assert error == 0 and ranges[18] == (0, 2) and ranges[0] == (0, 10) and len(ranges) == 24


@pytest.mark.parametrize("version", [3, 4])
def test_mock_cluster_quirk_at_v3_and_v4(version: int) -> None:
    frame = recorded(f"mock-ApiVersions-v{version}.bin")
    with pytest.raises(struct.error):  # kafka-python reads the raw count byte as an int32 count
        ApiVersionsResponse.decode(frame[8:], version=version)
    error, ranges = decode_api_versions_response(frame, version)
    assert (error, ranges) == (UNSUPPORTED_VERSION, {18: (0, 2)})
    assert api_versions_retry_version(error, ranges, UPSTREAM_REQUEST_VERSION) == 2


def test_retry_version_rules() -> None:
    assert api_versions_retry_version(0, {18: (0, 4)}, 3) is None
    assert api_versions_retry_version(35, {}, 3) == 0
    assert api_versions_retry_version(35, {}, 0) is None
    assert api_versions_retry_version(35, {18: (0, 3)}, 3) is None  # no lower version to try


@pytest.mark.parametrize("data", [b"", b"\x00\x00\x00\x02\x00\x00", struct.pack(">iihi", 10, 1, 0, 5) + b"\x00\x00"])
def test_garbage_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_api_versions_response(memoryview(data), 2)
