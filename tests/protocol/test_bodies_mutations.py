"""KIP-599 request reading, splitting and response merging, at every version of the three APIs.

The scenario throughout: a 5-topic request of which topics 0 and 2 are admitted. The split request
must decode (kafka-python) with exactly those 2 topics; the merged response must hold 5 entries in
the client's order, the admitted ones as the upstream answered them, the 3 others with error 89.
"""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.metadata import MetadataRequest

from kqp.protocol.apis import ApiKey
from kqp.protocol.mutations import (
    DEFAULT_MESSAGE,
    THROTTLING_QUOTA_EXCEEDED,
    TopicMutation,
    knows_throttling_error,
    merge_mutation_response,
    metadata_auto_create,
    mutation_request,
    split_mutation_request,
)
from kqp.protocol.records import BodyError

NAMES = [f"topic-{i}" for i in range(5)]
ADMITTED = [0, 2]
REJECTED = [1, 3, 4]
Creatable = CreateTopicsRequest.CreatableTopic


def create_topics_body(version: int, validate_only: bool = False) -> bytes:
    topics = [
        Creatable(name=NAMES[0], num_partitions=3, replication_factor=1, assignments=[], configs=[]),
        Creatable(name=NAMES[1], num_partitions=-1, replication_factor=-1, assignments=[], configs=[]),
        Creatable(name=NAMES[2], num_partitions=-1, replication_factor=-1, configs=[
            Creatable.CreatableTopicConfig(name="cleanup.policy", value="compact")],
            assignments=[Creatable.CreatableReplicaAssignment(partition_index=p, broker_ids=[1]) for p in range(4)]),
        Creatable(name=NAMES[3], num_partitions=0, replication_factor=1, assignments=[], configs=[
            Creatable.CreatableTopicConfig(name="retention.ms", value=None)]),
        Creatable(name=NAMES[4], num_partitions=12, replication_factor=3, assignments=[], configs=[]),
    ]  # fmt: skip
    request = CreateTopicsRequest(topics=topics, timeout_ms=30_000, validate_only=validate_only)
    return bytes(request.encode(version=version))


@pytest.mark.parametrize("version", range(CreateTopicsRequest.max_version + 1))
def test_create_topics_read_split_merge(version: int) -> None:
    body = create_topics_body(version, validate_only=True)
    topics, validate_only = mutation_request(ApiKey.CreateTopics, version, memoryview(body))
    # Costs: num_partitions, -1 = broker default (unknown), len(assignments), invalid 0 = nothing
    # created; along with what the broker validates before charging.
    assert topics == [
        TopicMutation(NAMES[0], 3, num_partitions=3, replication_factor=1),
        TopicMutation(NAMES[1], None, num_partitions=-1, replication_factor=-1),
        TopicMutation(NAMES[2], 4, num_partitions=-1, replication_factor=-1, assignments=4),
        TopicMutation(NAMES[3], 0, num_partitions=0, replication_factor=1, null_configs=("retention.ms",)),
        TopicMutation(NAMES[4], 12, num_partitions=12, replication_factor=3),
    ]
    assert validate_only is (version >= 1)  # validate_only exists from v1

    split = CreateTopicsRequest.decode(split_mutation_request(ApiKey.CreateTopics, version, body, ADMITTED),
                                       version=version)
    original = CreateTopicsRequest.decode(body, version=version)
    assert [t.name for t in split.topics] == [NAMES[0], NAMES[2]]
    assert split.topics == [original.topics[0], original.topics[2]]
    assert split.timeout_ms == 30_000

    Result = CreateTopicsResponse.CreatableTopicResult
    # The upstream answers out of order: matching is by name, not position.
    upstream = CreateTopicsResponse(throttle_time_ms=40, topics=[
        Result(name=NAMES[2], topic_id=uuid.UUID(int=9), error_code=0, error_message=None, num_partitions=4,
               replication_factor=1, configs=[]),
        Result(name=NAMES[0], topic_id=uuid.UUID(int=7), error_code=36, error_message="exists",
               num_partitions=3, replication_factor=1, configs=[]),
    ])  # fmt: skip
    merged_body = merge_mutation_response(
        ApiKey.CreateTopics, version, bytes(upstream.encode(version=version)), topics, ADMITTED, throttle_ms=25
    )
    merged = CreateTopicsResponse.decode(merged_body, version=version)
    assert [t.name for t in merged.topics] == NAMES
    assert [t.error_code for t in merged.topics] == [36, 89, 0, 89, 89]
    if version >= 1:
        assert [merged.topics[i].error_message for i in REJECTED] == [DEFAULT_MESSAGE] * 3
        assert merged.topics[0].error_message == "exists"
    if version >= 2:
        assert merged.throttle_time_ms == 40  # max(upstream 40, kqp 25)
    if version >= 5:
        assert [(merged.topics[i].num_partitions, merged.topics[i].replication_factor) for i in REJECTED] \
            == [(-1, -1)] * 3
        assert merged.topics[2].num_partitions == 4
    if version >= 7:
        assert [merged.topics[i].topic_id for i in ADMITTED] == [uuid.UUID(int=7), uuid.UUID(int=9)]


def delete_topics_body(version: int, by_id: bool) -> tuple[bytes, list]:
    if version <= 5:
        return bytes(DeleteTopicsRequest(topic_names=NAMES, timeout_ms=5000).encode(version=version)), NAMES
    State = DeleteTopicsRequest.DeleteTopicState
    states = [State(name=None, topic_id=uuid.UUID(int=i + 1)) if by_id else State(name=n, topic_id=None)
              for i, n in enumerate(NAMES)]  # fmt: skip
    return bytes(DeleteTopicsRequest(topics=states, timeout_ms=5000).encode(version=version)), states


@pytest.mark.parametrize(
    ("version", "by_id"),
    [(v, False) for v in range(DeleteTopicsRequest.max_version + 1)] + [(6, True)],
)
def test_delete_topics_read_split_merge(version: int, by_id: bool) -> None:
    body, entries = delete_topics_body(version, by_id)
    topics, validate_only = mutation_request(ApiKey.DeleteTopics, version, memoryview(body))
    assert validate_only is False
    if by_id:
        ids = [uuid.UUID(int=i + 1) for i in range(5)]
        assert topics == [TopicMutation(str(i), None, topic_id=i) for i in ids]
    else:
        assert topics == [TopicMutation(n, None) for n in NAMES]

    split = DeleteTopicsRequest.decode(split_mutation_request(ApiKey.DeleteTopics, version, body, [2, 0]),
                                       version=version)
    if version <= 5:
        assert split.topic_names == [NAMES[0], NAMES[2]]
    else:
        assert split.topics == [entries[0], entries[2]]

    Result = DeleteTopicsResponse.DeletableTopicResult
    # A broker answering deletes by id reports the resolved name along with the id.
    upstream = DeleteTopicsResponse(throttle_time_ms=0, responses=[
        Result(name=NAMES[i], topic_id=uuid.UUID(int=i + 1), error_code=0, error_message=None) for i in ADMITTED])
    merged = DeleteTopicsResponse.decode(merge_mutation_response(
        ApiKey.DeleteTopics, version, bytes(upstream.encode(version=version)), topics, ADMITTED, throttle_ms=900,
    ), version=version)  # fmt: skip
    assert [r.error_code for r in merged.responses] == [0, 89, 0, 89, 89]
    if by_id:
        assert [r.topic_id for r in merged.responses] == [uuid.UUID(int=i + 1) for i in range(5)]
        assert [r.name for r in merged.responses] == [NAMES[0], None, NAMES[2], None, None]
    else:
        assert [r.name for r in merged.responses] == NAMES
    if version >= 1:
        assert merged.throttle_time_ms == 900
    if version >= 5:
        assert merged.responses[1].error_message == DEFAULT_MESSAGE


@pytest.mark.parametrize("version", range(CreatePartitionsRequest.max_version + 1))
def test_create_partitions_read_split_merge(version: int) -> None:
    Topic = CreatePartitionsRequest.CreatePartitionsTopic
    request = CreatePartitionsRequest(topics=[
        Topic(name=n, count=10 + i, assignments=None if i % 2 else [
            Topic.CreatePartitionsAssignment(broker_ids=[1, 2])]) for i, n in enumerate(NAMES)],
        timeout_ms=100, validate_only=True)  # fmt: skip
    body = bytes(request.encode(version=version))
    topics, validate_only = mutation_request(ApiKey.CreatePartitions, version, memoryview(body))
    # The cost is the increment over the current count, which takes metadata: unknown here.
    assert topics == [TopicMutation(n, None, target_count=10 + i, assignments=None if i % 2 else 1)
                      for i, n in enumerate(NAMES)]  # fmt: skip
    assert validate_only is True

    split = CreatePartitionsRequest.decode(split_mutation_request(ApiKey.CreatePartitions, version, body, ADMITTED),
                                           version=version)  # fmt: skip
    assert split.topics == [request.topics[0], request.topics[2]]
    assert split.validate_only is True

    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    upstream = CreatePartitionsResponse(throttle_time_ms=3, results=[
        Result(name=NAMES[i], error_code=0, error_message=None) for i in ADMITTED])
    merged = CreatePartitionsResponse.decode(merge_mutation_response(
        ApiKey.CreatePartitions, version, bytes(upstream.encode(version=version)), topics, ADMITTED,
        error_message="custom", throttle_ms=2), version=version)  # fmt: skip
    assert [r.name for r in merged.results] == NAMES
    assert [r.error_code for r in merged.results] == [0, 89, 0, 89, 89]
    assert [merged.results[i].error_message for i in REJECTED] == ["custom"] * 3
    assert merged.throttle_time_ms == 3


@pytest.mark.parametrize("api_key", [ApiKey.CreateTopics, ApiKey.DeleteTopics, ApiKey.CreatePartitions])
def test_nothing_admitted_kqp_answers_alone(api_key: int) -> None:
    version = {ApiKey.CreateTopics: 7, ApiKey.DeleteTopics: 6, ApiKey.CreatePartitions: 3}[api_key]
    topics = [TopicMutation(n, 1) for n in NAMES]
    response_cls = {ApiKey.CreateTopics: CreateTopicsResponse, ApiKey.DeleteTopics: DeleteTopicsResponse,
                    ApiKey.CreatePartitions: CreatePartitionsResponse}[api_key]  # fmt: skip
    decoded = response_cls.decode(merge_mutation_response(api_key, version, None, topics, [], throttle_ms=1234),
                                  version=version)  # fmt: skip
    entries = decoded.topics if api_key == ApiKey.CreateTopics else (
        decoded.responses if api_key == ApiKey.DeleteTopics else decoded.results)
    assert [e.name for e in entries] == NAMES
    assert {e.error_code for e in entries} == {THROTTLING_QUOTA_EXCEEDED}
    assert decoded.throttle_time_ms == 1234
    with pytest.raises(ValueError):
        merge_mutation_response(api_key, version, None, topics, [0])


def test_kqp_made_entries_carry_their_own_errors() -> None:
    """The broker's own refusals kqp decides (here 36 and 3) travel with its 89s, each with its
    message; entries without one get the default 89."""
    topics = [TopicMutation(n, 1) for n in NAMES[:3]]
    body = merge_mutation_response(ApiKey.CreateTopics, 7, None, topics, [], throttle_ms=5,
                                   errors={0: (36, "Topic 'topic-0' already exists."), 2: (3, None)})
    merged = CreateTopicsResponse.decode(body, version=7)
    assert [(t.name, t.error_code, t.error_message) for t in merged.topics] == [
        (NAMES[0], 36, "Topic 'topic-0' already exists."), (NAMES[1], 89, DEFAULT_MESSAGE), (NAMES[2], 3, None)]


@pytest.mark.parametrize("version", range(MetadataRequest.max_version + 1))
def test_metadata_auto_create_names_what_the_broker_may_create(version: int) -> None:
    Topic = MetadataRequest.MetadataRequestTopic

    def body(topics: list | None, allow: bool) -> bytes:
        fields = {"topics": topics, "allow_auto_topic_creation": allow, "include_cluster_authorized_operations": False,
                  "include_topic_authorized_operations": False}  # fmt: skip
        return bytes(MetadataRequest(**fields).encode(version=version))

    named = [Topic(name=n, topic_id=None) for n in NAMES[:2]]
    assert metadata_auto_create(version, body(named, True)) == NAMES[:2]
    # Before v4 the request has no flag and the broker's auto.create.topics.enable alone decides.
    assert metadata_auto_create(version, body(named, False)) == ([] if version >= 4 else NAMES[:2])
    # All topics (v0: an empty list; v1+: null) never creates anything.
    assert metadata_auto_create(version, body([] if version == 0 else None, True)) == []
    if version >= 12:   # by id only: nothing to create
        assert metadata_auto_create(version, body([Topic(name=None, topic_id=uuid.uuid4())], True)) == []


def test_upstream_omissions_and_extras() -> None:
    topics = [TopicMutation(n, 1) for n in NAMES[:3]]
    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    upstream = CreatePartitionsResponse(throttle_time_ms=0, results=[
        Result(name="unexpected", error_code=0, error_message=None)])  # fmt: skip
    merged = CreatePartitionsResponse.decode(merge_mutation_response(
        ApiKey.CreatePartitions, 3, bytes(upstream.encode(version=3)), topics, [0, 2]), version=3)  # fmt: skip
    # Admitted topics the upstream did not answer stay out; what it added is kept at the end.
    assert [r.name for r in merged.results] == [NAMES[1], "unexpected"]


@pytest.mark.parametrize(("api_key", "first"),
                         [(ApiKey.CreateTopics, 6), (ApiKey.DeleteTopics, 5), (ApiKey.CreatePartitions, 3)])
def test_knows_throttling_error(api_key: int, first: int) -> None:
    assert not knows_throttling_error(api_key, first - 1)
    assert knows_throttling_error(api_key, first)
    assert knows_throttling_error(api_key, first + 1)


def test_not_a_mutation_api() -> None:
    with pytest.raises(ValueError):
        knows_throttling_error(0, 9)
    with pytest.raises(ValueError):
        mutation_request(0, 9, b"")


@pytest.mark.parametrize(("api_key", "version"),
                         [(ApiKey.CreateTopics, 4), (ApiKey.CreateTopics, 7), (ApiKey.DeleteTopics, 6)])
def test_truncated_mutation_request_is_a_body_error(api_key: int, version: int) -> None:
    body = create_topics_body(version) if api_key == ApiKey.CreateTopics else delete_topics_body(version, True)[0]
    for cut in range(len(body)):
        with pytest.raises(BodyError):
            mutation_request(api_key, version, memoryview(body)[:cut])


def test_split_rejects_out_of_range_index() -> None:
    with pytest.raises(ValueError):
        split_mutation_request(ApiKey.CreateTopics, 7, create_topics_body(7), [5])


def test_unknown_version_is_a_body_error() -> None:
    with pytest.raises(BodyError):
        mutation_request(ApiKey.CreateTopics, 99, create_topics_body(7))
