"""The per-API tables derived from kafka-python, and the KIP-219 client-throttling table."""

from __future__ import annotations

import pytest

from kqp.protocol.apis import (
    API_NAMES,
    decodable_range,
    kqp_ranges,
    message_classes,
    request_header_version,
    response_header_version,
    should_client_throttle,
)
from kqp.protocol.errors import UnsupportedApi


def test_names_cover_every_kafka_api_including_undecodable_ones() -> None:
    assert API_NAMES[0] == "Produce" and API_NAMES[18] == "ApiVersions" and API_NAMES[4] == "LeaderAndIsr"
    with pytest.raises(TypeError):
        API_NAMES[0] = "x"  # read-only


def test_ranges_come_from_the_schemas() -> None:
    ranges = kqp_ranges()
    for key in (3, 10, 18, 19, 20, 37, 60):
        req, resp = message_classes(key)
        assert ranges[key] == decodable_range(key) == tuple(req.valid_versions) == tuple(resp.valid_versions)
        assert req.API_KEY == resp.API_KEY == key and req.is_request() and not resp.is_request()
    assert decodable_range(4) is None  # inter-broker LeaderAndIsr: not in kafka-python, not decodable
    # Produce and Fetch from v0, as Kafka 3.9 defines them; kafka-python's schemas (Kafka 4's) start at v3 and v4.
    for key, schema_low in ((0, 3), (1, 4)):
        req, resp = message_classes(key)
        assert req.valid_versions[0] == resp.valid_versions[0] == schema_low
        assert ranges[key] == decodable_range(key) == (0, req.valid_versions[1])
    ranges[0] = (0, 0)
    assert kqp_ranges()[0] != (0, 0)  # callers get a copy


def test_header_versions_follow_flexible_versions() -> None:
    assert [request_header_version(3, v) for v in (8, 9)] == [1, 2]
    assert [response_header_version(3, v) for v in (8, 9)] == [0, 1]
    assert [request_header_version(18, v) for v in (2, 3)] == [1, 2]
    assert response_header_version(18, 4) == 0  # KIP-511
    assert request_header_version(17, 1) == 1  # SaslHandshake is never flexible
    # LeaderAndIsr has no schema in kafka-python: its header versions come from Kafka 3.9's facts (4+).
    assert [request_header_version(4, v) for v in (3, 4)] == [1, 2]
    with pytest.raises(UnsupportedApi):
        request_header_version(52, 0)   # Vote: controller-only, known to neither
    with pytest.raises(UnsupportedApi):
        message_classes(1000)


@pytest.mark.parametrize(
    ("api_key", "throttling_from"),
    [(0, 6), (1, 8), (3, 6), (10, 2), (11, 3), (18, 2), (19, 3), (20, 2), (22, 1), (32, 2), (44, 0), (47, 0)],
)
def test_should_client_throttle_matches_kafka(api_key: int, throttling_from: int) -> None:
    lo, hi = decodable_range(api_key)
    for v in range(lo, hi + 1):
        assert should_client_throttle(api_key, v) == (v >= throttling_from)


@pytest.mark.parametrize("api_key", [17, 36, 48, 49, 55, 57, 60, 61, 65, 66, 27])
def test_responses_kafka_does_not_override_never_client_throttle(api_key: int) -> None:
    lo, hi = decodable_range(api_key)
    assert not any(should_client_throttle(api_key, v) for v in range(lo, hi + 1))
