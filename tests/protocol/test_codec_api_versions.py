"""kqp's own ApiVersions answer, the above-max fallback, and the probe kqp asks upstreams with."""

from __future__ import annotations

import struct

import pytest
from codec_support import recorded_frames
from kafka.protocol.metadata import ApiVersionsResponse

from kqp.protocol.api_versions import (
    PROBE_VERSION,
    UNSUPPORTED_VERSION,
    ApiVersionsProbe,
    decode_api_versions_response,
    encode_api_versions_response,
    intersect_ranges,
)
from kqp.protocol.apis import ApiKey, decodable_range, kqp_ranges
from kqp.protocol.errors import ProtocolError
from kqp.protocol.headers import response_correlation_id
from kqp.protocol.messages import encode_request

MAX = decodable_range(ApiKey.ApiVersions)[1]
RANGES = {ApiKey.Produce: (3, 11), ApiKey.Fetch: (4, 16), ApiKey.Metadata: (0, 12), ApiKey.ApiVersions: (0, 4)}


@pytest.mark.parametrize("version", range(MAX + 1))
def test_encode_every_version_decodes_with_kafka_python(version: int) -> None:
    frame = encode_api_versions_response(version, 99, RANGES, throttle_ms=250)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert response_correlation_id(memoryview(frame)) == 99
    # Header v0 at every version; v5 (KIP-1242) changed the request only, so kafka-python reads it as v4.
    decoded = ApiVersionsResponse.decode(frame[8:], version=min(version, 4))
    assert decoded.error_code == 0
    assert {a.api_key: (a.min_version, a.max_version) for a in decoded.api_keys} == RANGES
    assert [a.api_key for a in decoded.api_keys] == sorted(RANGES)
    assert decoded.throttle_time_ms == (250 if version >= 1 else 0)
    assert decode_api_versions_response(memoryview(frame), version) == (0, RANGES)
    if version >= 3:
        assert frame.endswith(b"\x00")  # no tagged fields: nothing for old librdkafka to trip on


def test_each_answer_says_the_ranges_and_correlation_of_its_own_request() -> None:
    """The body is encoded once per (version, ranges): a range that changes (a reload, an upstream
    upgraded) or another request's correlation id must still show."""
    first = encode_api_versions_response(3, 1, RANGES)
    narrowed = {**RANGES, ApiKey.Fetch: (4, 12)}
    assert decode_api_versions_response(memoryview(encode_api_versions_response(3, 2, narrowed)), 3) == (0, narrowed)
    again = encode_api_versions_response(3, 3, RANGES)
    assert response_correlation_id(memoryview(again)) == 3 and again[8:] == first[8:]
    assert decode_api_versions_response(memoryview(again), 3) == (0, RANGES)


@pytest.mark.parametrize("version", [MAX + 1, 9, 32767])
def test_above_max_gets_kafkas_v0_unsupported_version_answer(version: int) -> None:
    frame = encode_api_versions_response(version, 5, RANGES, throttle_ms=10)
    body = frame[8:]
    # v0 body: error int16, int32 count, one (key, min, max) entry, no throttle, nothing else
    assert body == struct.pack(">hihhh", UNSUPPORTED_VERSION, 1, ApiKey.ApiVersions, 0, min(4, MAX))
    decoded = ApiVersionsResponse.decode(body, version=0)
    assert decoded.error_code == 35 and decoded.api_keys[0].api_key == ApiKey.ApiVersions
    error, ranges = decode_api_versions_response(memoryview(frame), version)
    assert (error, ranges) == (35, {ApiKey.ApiVersions: (0, min(4, MAX))})
    # ...which kqp's own probe, had it asked that version, follows down to the range it names
    assert ApiVersionsProbe(version).answered(memoryview(frame)) == ApiVersionsProbe(min(4, MAX))


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
    # not v0 layout, so the answer names no range: Kafka's client then retries at v0
    assert decode_api_versions_response(frame, version) == (UNSUPPORTED_VERSION, {})
    assert ApiVersionsProbe(version).answered(frame) == ApiVersionsProbe(0)


def answer(version: int, error: int, ranges: dict[int, tuple[int, int]]) -> memoryview:
    """An upstream's answer as Kafka's broker writes it: error answers in v0 layout."""
    body = ApiVersionsResponse(
        version=version, error_code=error, throttle_time_ms=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                  for k, (lo, hi) in ranges.items()],
    ).encode(version=0 if error else version)
    return memoryview(struct.pack(">ii", 4 + len(body), 1) + body)


def test_probe_asks_v3_with_software_name_then_follows_kafkas_fallback() -> None:
    first = ApiVersionsProbe()
    assert (first.version, first.ranges) == (PROBE_VERSION, None) == (3, None)
    # Kafka refuses a v3+ request whose software name is empty (INVALID_REQUEST), so it is set.
    fields = first.request_fields
    request = encode_request(ApiKey.ApiVersions, first.version, 1, "kqp", **fields)
    assert fields["client_software_name"] == "kqp" and b"\x04kqp" in request
    assert ApiVersionsProbe(2).request_fields == {}  # v0-v2 have no body
    # a Kafka broker older than 2.4: UNSUPPORTED_VERSION with its ApiVersions range 0-2
    second = first.answered(answer(3, UNSUPPORTED_VERSION, {ApiKey.ApiVersions: (0, 2)}))
    assert second == ApiVersionsProbe(2)
    done = second.answered(answer(2, 0, RANGES))
    assert done == ApiVersionsProbe(2, RANGES)


def test_probe_falls_back_to_v0_when_the_answer_names_no_range() -> None:
    assert ApiVersionsProbe(3).answered(answer(3, UNSUPPORTED_VERSION, {})) == ApiVersionsProbe(0)
    other_apis_only = answer(3, UNSUPPORTED_VERSION, {ApiKey.Produce: (0, 9)})
    assert ApiVersionsProbe(3).answered(other_apis_only) == ApiVersionsProbe(0)


@pytest.mark.parametrize(("asked", "error", "ranges", "message"), [
    (3, 42, RANGES, "ApiVersions v3 answered with error code 42"),  # only UNSUPPORTED_VERSION retries
    (0, UNSUPPORTED_VERSION, {}, "no lower version"),  # v0 is the floor
    (2, UNSUPPORTED_VERSION, {ApiKey.ApiVersions: (0, 3)}, "no lower version"),  # would not go lower
])
def test_probe_ends_with_a_protocol_error(asked: int, error: int, ranges: dict, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        ApiVersionsProbe(asked).answered(answer(asked, error, ranges))


def test_a_clean_answer_must_fit_the_version_asked() -> None:
    v3 = answer(3, 0, RANGES)
    with pytest.raises(ProtocolError, match="unreadable ApiVersions v2"):
        ApiVersionsProbe(2).answered(v3)


@pytest.mark.parametrize("data", [b"", b"\x00\x00\x00\x02\x00\x00", struct.pack(">iihi", 10, 1, 0, 5) + b"\x00\x00"])
def test_garbage_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_api_versions_response(memoryview(data), 2)
