"""kqp's own definitions of what kafka-python lacks at Kafka 4.4, and what kqp reads through them.

The generic suites walk, throttle and rewrite every (api, version) kqp decodes, these included
(test_codec_walker.py, test_codec_throttle.py, test_codec_addresses.py); tests/e2e/test_kafka44_protocol.py
holds the definitions to a real Kafka 4.4's frames. Here: the notation and the classes it makes,
the facts of the APIs passed on their header alone, what kqp advertises in front of Kafka 4.4's
ranges, and ShareFetch's readers (max_bytes, record counts, records per topic, the broker's
throttled answer, node endpoints) over whole and split frames.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from helpers.quota_frames import record_batch
from kafka.protocol.metadata import ApiVersionsRequest as KafkaPythonApiVersionsRequest

from kqp.protocol.addresses import rewrite_addresses, rewrite_addresses_parts
from kqp.protocol.advertised import advertised_ranges, header_only_pairs
from kqp.protocol.api_versions import intended_broker
from kqp.protocol.apis import API_NAMES, ApiKey, message_classes, request_header_version, response_header_version
from kqp.protocol.definitions import array, field, message, message_class
from kqp.protocol.errors import ProtocolError
from kqp.protocol.fetch import cap_share_fetch_max_bytes, empty_share_fetch_response, share_fetch_response_counts_parts
from kqp.protocol.headers import encode_response_header, parse_request_header
from kqp.protocol.kafka44 import DEFINITIONS, STREAMS_GROUP_TOPOLOGY_UPDATE, UNREGISTER_CONTROLLER
from kqp.protocol.messages import encode_request
from kqp.protocol.schemas import schema
from kqp.protocol.throttle_field import throttle_field_kind
from kqp.protocol.topic_bytes import share_fetch_response_topics

# What Apache Kafka 4.4.0's broker listener advertised to kafka-broker-api-versions (one KRaft node,
# no client metrics reporter: no telemetry APIs).
KAFKA_44 = {0: (0, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 8: (2, 10), 9: (1, 10), 10: (0, 6), 11: (0, 9),
            12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1), 18: (0, 5), 19: (2, 7),
            20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (1, 2),
            28: (0, 6), 29: (1, 3), 30: (1, 3), 31: (1, 3), 32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 5),
            36: (0, 2), 37: (0, 3), 38: (1, 3), 39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 3), 43: (0, 2),
            44: (0, 1), 45: (0, 1), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0),
            55: (0, 2), 57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 2), 68: (0, 1),
            69: (0, 1), 74: (0, 1), 75: (0, 0), 76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 80: (0, 1),
            81: (0, 0), 83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1), 88: (0, 1), 89: (0, 1),
            90: (0, 1), 91: (0, 0), 92: (0, 0), 93: (0, 0), 94: (0, 0)}
ShareFetchRequest, ShareFetchResponse = message_classes(ApiKey.ShareFetch)
_I32 = struct.Struct(">i")


def test_kqp_advertises_what_kafka_44_advertises() -> None:
    ours = advertised_ranges(KAFKA_44)
    assert {API_NAMES[k]: r for k, r in ours.items() if KAFKA_44.get(k) != r} == {}
    assert ours.keys() == KAFKA_44.keys()


def test_the_notation_makes_kafka_python_classes() -> None:
    definition = message("PingRequest", 200, "1-2", "1+", field("Id", "int32"),
                         array("Names", "Name", field("Text", "string", "2+", nullable="2+", default="null")))
    ping = message_class(definition)
    assert ping.name == "PingRequest" and ping.API_KEY == 200 and ping.valid_versions == (1, 2)
    assert ping.is_request() and ping.flexible_version_q(1) and not ping.flexible_version_q(0)
    encoded = ping(version=2, id=7, names=[ping.Name(text=None)]).encode(version=2)
    decoded = ping.decode(encoded, version=2)
    assert decoded.id == 7 and decoded.names[0].text is None


def test_newer_versions_leave_kafka_pythons_own_classes_alone() -> None:
    request, response = message_classes(ApiKey.ApiVersions)
    assert request.valid_versions == (0, 5) and KafkaPythonApiVersionsRequest.valid_versions == (0, 4)
    assert schema("ApiVersionsRequest") is DEFINITIONS["ApiVersionsRequest"]
    assert [f["name"] for f in schema("ApiVersionsRequest")["fields"]][-2:] == ["ClusterId", "NodeId"]
    # ApiVersions' own rule survives: an error answer is read as v0 whatever was asked (KIP-511).
    error = response(version=0, error_code=35, api_keys=[]).encode(version=0)
    assert response.decode(error, version=5).error_code == 35
    assert message_classes(ApiKey.TxnOffsetCommit)[0].valid_versions == (0, 6)
    assert message_classes(ApiKey.DeleteGroups)[1].valid_versions == (0, 3)


def test_apis_passed_on_their_header_alone_at_kafka_44s_versions() -> None:
    passed = set(header_only_pairs())
    for api, newest in ((ApiKey.ShareGroupHeartbeat, 1), (ApiKey.StreamsGroupHeartbeat, 1),
                        (ApiKey.DescribeShareGroupOffsets, 1), (STREAMS_GROUP_TOPOLOGY_UPDATE, 0),
                        (UNREGISTER_CONTROLLER, 0), (ApiKey.AddRaftVoter, 1)):
        assert (api, newest) in passed and (api, newest + 1) not in passed, API_NAMES[api]
        assert request_header_version(api, newest) == 2 and response_header_version(api, newest) == 1
        assert throttle_field_kind(api, newest) == "first"   # Kafka writes it first: kqp tells a throttle there
    assert API_NAMES[93] == "StreamsGroupTopologyDescriptionUpdate" and API_NAMES[94] == "UnregisterController"
    assert throttle_field_kind(ApiKey.WriteShareGroupState, 1) == "none"   # a broker's RPC, results first
    assert not any(api in (ApiKey.ShareFetch, ApiKey.ShareAcknowledge) for api, _ in passed), "read, never blind"


def test_api_versions_v5_names_the_broker_a_client_means() -> None:
    def body(version: int, **ids: object) -> memoryview:
        frame = memoryview(encode_request(ApiKey.ApiVersions, version, 1, "c", client_software_name="x",
                                          client_software_version="1", **ids))
        return frame[parse_request_header(frame).body_offset:]

    assert intended_broker(5, body(5, cluster_id="abc", node_id=3)) == ("abc", 3)
    assert intended_broker(5, body(5)) == (None, -1)
    assert intended_broker(4, body(4)) is None
    assert intended_broker(5, b"\xff\xff") is None


# -- ShareFetch's readers ---------------------------------------------------------------------------

def share_fetch_frame(version: int, records: int = 5, endpoints: int = 0, error_code: int = 0,
                      topics: int = 2) -> bytes:
    topic = ShareFetchResponse.ShareFetchableTopicResponse
    part = topic.PartitionData
    responses = [topic(topic_id=uuid.UUID(int=t + 1), partitions=[part(
        partition_index=p, error_code=0, error_message=None, acknowledge_error_code=0, acknowledge_error_message=None,
        current_leader=part.LeaderIdAndEpoch(leader_id=1, leader_epoch=3),
        records=record_batch(f"t{t}p{p}", records) if records else b"",
        acquired_records=[part.AcquiredRecords(first_offset=0, last_offset=records, delivery_count=1)])
        for p in range(2)]) for t in range(topics)]
    body = ShareFetchResponse(
        version=version, throttle_time_ms=0, error_code=error_code, error_message=None,
        acquisition_lock_timeout_ms=30_000, responses=responses,
        node_endpoints=[ShareFetchResponse.NodeEndpoint(node_id=n, host="up", port=9090 + n, rack=None)
                        for n in range(1, endpoints + 1)]).encode(version=version)
    head = encode_response_header(ApiKey.ShareFetch, version, 7)
    return _I32.pack(len(head) + len(body)) + head + bytes(body)


def cuts(frame: bytes, step: int) -> list[tuple[bytes, ...]]:
    """`frame` cut in two at every `step`th byte, and in many small parts."""
    out = [(frame[:at], frame[at:]) for at in range(1, len(frame), step)]
    out.append(tuple(frame[i:i + 97] for i in range(0, len(frame), 97)))
    return out


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_max_bytes_is_capped_and_min_bytes_with_it(version: int) -> None:
    def ask(max_bytes: int, min_bytes: int) -> bytes:
        return bytes(ShareFetchRequest(
            version=version, group_id="g", member_id="m", share_session_epoch=3, max_wait_ms=500, min_bytes=min_bytes,
            max_bytes=max_bytes, max_records=500, batch_size=500, topics=[], forgotten_topics_data=[],
        ).encode(version=version))

    capped = ShareFetchRequest.decode(cap_share_fetch_max_bytes(version, ask(50 << 20, 1 << 20), 1000), version=version)
    assert (capped.max_bytes, capped.min_bytes, capped.max_records, capped.share_session_epoch) == (1000, 1000, 500, 3)
    assert cap_share_fetch_max_bytes(version, ask(900, 1), 1000) is None


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_counts_and_topics_over_any_cuts(version: int) -> None:
    frame = share_fetch_frame(version)
    whole = share_fetch_response_counts_parts(version, (frame,), 9)
    assert (whole.records, whole.batches) == (2 * 2 * 5, 4)
    topics = share_fetch_response_topics(version, (frame,), 9)
    assert [t for t, _ in topics.topics()] == [uuid.UUID(int=1), uuid.UUID(int=2)]
    for parts in cuts(frame, 211):
        assert share_fetch_response_counts_parts(version, parts, 9) == whole
        assert share_fetch_response_topics(version, parts, 9).topics() == topics.topics()


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("endpoints", [0, 2])
def test_share_fetch_endpoints_over_any_cuts(version: int, endpoints: int) -> None:
    frame = share_fetch_frame(version, endpoints=endpoints)
    mapper = lambda node, host, port: ("kqp", 19000 + node)   # noqa: E731
    new, seen = rewrite_addresses(ApiKey.ShareFetch, version, memoryview(frame), 9, mapper)
    assert len(seen) == endpoints and (new is None) == (endpoints == 0)
    if new is not None:
        decoded = ShareFetchResponse.decode(new[9:], version=version)
        assert [(e.host, e.port) for e in decoded.node_endpoints] == [("kqp", 19001), ("kqp", 19002)]
        assert len(decoded.responses) == 2
    for parts in cuts(frame, 173):
        got, seen_parts = rewrite_addresses_parts(ApiKey.ShareFetch, version, parts, 9, mapper)
        assert seen_parts == seen
        assert (got is None and new is None) or b"".join(got) == new
    with pytest.raises(ProtocolError):
        rewrite_addresses(ApiKey.ShareFetch, version, memoryview(frame[:-3]), 9, mapper)


@pytest.mark.parametrize("version", [1, 2])
def test_the_brokers_throttled_share_fetch_answer(version: int) -> None:
    frame = share_fetch_frame(version, endpoints=1)
    empty = empty_share_fetch_response(version, (frame[:20], frame[20:]), 9, 1234)
    assert empty is not None and empty[4:9] == frame[4:9], "the upstream's header kept"
    decoded = ShareFetchResponse.decode(empty[9:], version=version)
    assert (decoded.throttle_time_ms, decoded.error_code, decoded.responses, decoded.node_endpoints,
            decoded.acquisition_lock_timeout_ms) == (1234, 0, [], [], 0)
    assert empty_share_fetch_response(version, (share_fetch_frame(version, records=0, error_code=122),), 9, 5) is None
