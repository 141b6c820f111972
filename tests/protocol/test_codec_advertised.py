"""What kqp advertises in front of an upstream, and what it forwards on its header alone."""

from __future__ import annotations

from kqp.protocol.advertised import BODY_APIS, advertised_ranges, header_only_pairs
from kqp.protocol.apis import ApiKey, decodable_range, known_range
from kqp.protocol.kafka39 import UNSCHEMED

# A Kafka 3.9 broker's ranges (its definitions' validVersions), plus what a newer upstream may add.
KAFKA_3_9 = {
    ApiKey.Produce: (0, 11), ApiKey.Fetch: (0, 17), ApiKey.ListOffsets: (0, 9), ApiKey.Metadata: (0, 12),
    ApiKey.OffsetCommit: (0, 9), ApiKey.FindCoordinator: (0, 6), ApiKey.CreateTopics: (0, 7),
    ApiKey.DeleteTopics: (0, 6), ApiKey.DescribeCluster: (0, 1), ApiKey.CreateDelegationToken: (0, 3),
    ApiKey.ConsumerGroupHeartbeat: (0, 1), ApiKey.GetTelemetrySubscriptions: (0, 0), ApiKey.ShareFetch: (0, 0),
    ApiKey.Vote: (0, 1), 1000: (0, 3),
}


def test_what_kqp_advertises_in_front_of_kafka_3_9() -> None:
    assert advertised_ranges(KAFKA_3_9) == {
        ApiKey.Produce: (0, 11), ApiKey.Fetch: (0, 17),     # decoded from v0 (Kafka 3.9's facts)
        ApiKey.ListOffsets: (0, 9),                          # v0 header-only, v1+ decoded
        ApiKey.Metadata: (0, 12), ApiKey.FindCoordinator: (0, 6), ApiKey.DescribeCluster: (0, 1),
        ApiKey.OffsetCommit: (0, 9),                         # v0-v1 header-only
        ApiKey.CreateTopics: (2, 7), ApiKey.DeleteTopics: (1, 6),   # KIP-599 reads them: decodable only
        ApiKey.CreateDelegationToken: (0, 3),                # no schema: header-only
        ApiKey.ConsumerGroupHeartbeat: (0, 1),               # KIP-848's released v1 (Kafka 4's facts)
        ApiKey.GetTelemetrySubscriptions: (0, 0),
        # ShareFetch names brokers kqp cannot rewrite; Vote is controller-only; 1000 is unknown.
    }


def test_every_api_whose_response_names_brokers_is_kept_to_decodable_versions() -> None:
    """Derived from the schemas (kafka-python's, Kafka 3.9's facts), not listed by hand."""
    naming = {ApiKey.Metadata, ApiKey.FindCoordinator, ApiKey.DescribeCluster, ApiKey.DescribeQuorum,
              ApiKey.Produce, ApiKey.Fetch, ApiKey.ShareFetch, ApiKey.ShareAcknowledge}
    assert naming <= BODY_APIS


def test_apis_whose_bodies_kqp_reads_are_advertised_only_where_decodable() -> None:
    for api in BODY_APIS:
        rng = decodable_range(api)
        if rng is None:   # ShareFetch, ShareAcknowledge: no schema, never advertised
            assert UNSCHEMED[api].names_brokers
            assert advertised_ranges({api: (0, 99)}) == {}
        else:
            assert advertised_ranges({api: (0, 99)}) == {api: rng}
            assert not any(pair[0] == api for pair in header_only_pairs())


def test_header_only_versions_are_exactly_the_known_undecodable_ones() -> None:
    pairs = header_only_pairs()
    assert (ApiKey.ListOffsets, 0) in pairs and (ApiKey.ListOffsets, 1) not in pairs
    assert (ApiKey.OffsetCommit, 1) in pairs and (ApiKey.OffsetCommit, 2) not in pairs
    assert (ApiKey.GetTelemetrySubscriptions, 0) in pairs and (ApiKey.GetTelemetrySubscriptions, 1) not in pairs
    for api, version in pairs:
        assert api not in BODY_APIS
        lo, hi = known_range(api)
        decodable = decodable_range(api)
        assert lo <= version <= hi and (decodable is None or not decodable[0] <= version <= decodable[1])
