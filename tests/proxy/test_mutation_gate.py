"""MutationGate: KIP-599 per-topic admission, split/merge, costs and the topic cache, pure.

No sockets and no sleeps: the gate gets a real QuotaManager and topic cache, a clock that is a
number the test moves, and request/response frames encoded with kafka-python's message classes. Unless a
test says otherwise the quota is KIP-599's worked example: Q = 5 mutations/s, 100 windows of 1 s,
so the bucket's rate R = 5 and burst B = Q * S * W = 500.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

import pytest
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.metadata import MetadataResponse

from kqp.config.model import HostPort
from kqp.protocol.apis import ApiKey
from kqp.protocol.headers import encode_response_header, parse_request_header
from kqp.protocol.messages import encode_request
from kqp.protocol.mutations import THROTTLING_QUOTA_EXCEEDED
from kqp.proxy.connection.mutation_gate import GATED_APIS, MutationGate
from kqp.proxy.connection.topic_metadata import TopicMetadata
from kqp.proxy.runtime.topic_lookup import TopicLookup
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import EntitySpec, Principal, QuotaSettings

ADMIN = Principal("ANONYMOUS", "admin")
OTHER = Principal("ANONYMOUS", "someone-else")
Creatable = CreateTopicsRequest.CreatableTopic


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_gate(rate: float = 5, window_count: int = 100, window_size: float = 1.0) -> tuple[MutationGate, Clock]:
    clock = Clock()
    settings = QuotaSettings(window_size_seconds=window_size, window_count=window_count,
                             entities={EntitySpec(None, "admin"): {"controller_mutation_rate": rate}})
    return MutationGate(QuotaManager(settings, 0.0), TopicMetadata()), clock


def request(api: int, version: int, client_id: str = "admin", correlation_id: int = 7, **fields: Any):
    frame = memoryview(encode_request(api, version, correlation_id, client_id, **fields))
    return parse_request_header(frame), frame


def create_topics(version: int, partitions: list[int], validate_only: bool = False, prefix: str = "t"):
    topics = [Creatable(name=f"{prefix}{i}", num_partitions=n, replication_factor=1, assignments=[], configs=[])
              for i, n in enumerate(partitions)]
    return request(ApiKey.CreateTopics, version, topics=topics, timeout_ms=1000, validate_only=validate_only)


def tokens(gate: MutationGate, clock: Clock) -> float:
    [state] = [s for s in gate.quotas.snapshot(clock.now) if s.quota_type == "controller_mutation_rate"]
    return state.tokens


def response_frame(api: int, version: int, correlation_id: int, body: bytes) -> memoryview:
    head = encode_response_header(api, version, correlation_id)
    return memoryview(struct.pack(">i", len(head) + len(body)) + head + body)


def body_of(frame: bytes | memoryview, api: int, version: int) -> memoryview:
    view = memoryview(frame)
    return view[4 + len(encode_response_header(api, version, 0)):]


def create_result(name: str, error: int = 0, partitions: int = -1) -> Any:
    return CreateTopicsResponse.CreatableTopicResult(
        name=name, topic_id=uuid.uuid4(), error_code=error, error_message=None, num_partitions=partitions,
        replication_factor=1, configs=[])


def metadata_body(version: int, topics: dict[str, tuple[int, uuid.UUID]]) -> bytes:
    Topic = MetadataResponse.MetadataResponseTopic
    Partition = Topic.MetadataResponsePartition
    response = MetadataResponse(version=version, throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=1,
                                topics=[Topic(error_code=0, name=name, topic_id=topic_id, is_internal=False,
                                              partitions=[Partition(error_code=0, partition_index=p, leader_id=1,
                                                                    leader_epoch=0, replica_nodes=[1], isr_nodes=[1],
                                                                    offline_replicas=[]) for p in range(count)])
                                        for name, (count, topic_id) in topics.items()])
    return bytes(response.encode(version=version))


def feed_metadata(gate: MutationGate, version: int, topics: dict[str, tuple[int, uuid.UUID]]) -> None:
    hdr, frame = request(ApiKey.Metadata, version, topics=None)
    plan = gate.plan(ADMIN, hdr, frame, 0.0)
    assert plan.rewrite is not None
    response = response_frame(ApiKey.Metadata, version, 7, metadata_body(version, topics))
    assert plan.rewrite(response, len(response) - len(metadata_body(version, topics)), 0.0) is response


# -- KIP-599's worked example --------------------------------------------------------------------

def test_kip599_example_strict_create_topics() -> None:
    gate, clock = make_gate()
    # 7 topics x 80 partitions = 560 mutations at T = 0, CreateTopics v7 (strict). Tokens before
    # each topic: 500, 420, 340, 260, 180, 100, 20 -- all >= 0, so all 7 are admitted, and the
    # bucket ends at 500 - 560 = -60. An admitted topic never throttles.
    hdr, frame = create_topics(7, [80] * 7)
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.answer is None and plan.violations == []
    assert plan.frame is frame                       # forwarded untouched
    assert tokens(gate, clock) == -60
    # The next CreateTopics is answered by kqp alone with error 89, throttle -K/R = 60 / 5 = 12 s.
    hdr, frame = create_topics(7, [1], prefix="next")
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.answer is not None
    [violation] = plan.violations
    assert violation.throttle_seconds == 12.0
    answer = CreateTopicsResponse.decode(bytes(body_of(plan.answer, ApiKey.CreateTopics, 7)), version=7)
    assert answer.throttle_time_ms == 12_000
    assert [(t.name, t.error_code) for t in answer.topics] == [("next0", THROTTLING_QUOTA_EXCEEDED)]
    assert struct.unpack_from(">i", plan.answer, 4)[0] == 7     # the client's correlation id
    # At 11.5 s K = -60 + 57.5 = -2.5: still rejected, for 2.5 / 5 = 0.5 s.
    clock.now = 11.5
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.answer is not None and plan.violations[0].throttle_seconds == pytest.approx(0.5)
    # At 12 s K = 0: admitted again (and K = -1).
    clock.now = 12.0
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.answer is None and plan.violations == []
    assert tokens(gate, clock) == -1


def test_kip599_example_permissive_old_version() -> None:
    gate, clock = make_gate()
    # CreateTopics v5 cannot carry error 89: the 560 mutations are admitted and the response is
    # throttled by -K/R = 12 s instead.
    hdr, frame = create_topics(5, [80] * 7)
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.answer is None and plan.frame is frame
    [violation] = plan.violations
    assert violation.throttle_seconds == 12.0
    # A later old-version request is admitted too, and throttled by its own debt: K = -60 - 5 at
    # T = 0 gives 65 / 5 = 13 s.
    hdr, frame = create_topics(5, [5], prefix="more")
    assert gate.plan(ADMIN, hdr, frame, clock.now).violations[0].throttle_seconds == 13.0


# -- split and merge ---------------------------------------------------------------------------

def test_strict_split_forwards_admitted_and_merges_in_client_order() -> None:
    gate, clock = make_gate(rate=5, window_count=2)      # B = 5 * 2 * 1 = 10 tokens
    # 4 topics of 4 partitions: 10 -> 6 -> 2 -> -2 (third admitted at K = 2), fourth rejected at
    # K = -2 with throttle 2 / 5 = 0.4 s.
    hdr, frame = create_topics(7, [4, 4, 4, 4])
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.answer is None and plan.rewrite is not None
    assert plan.violations[0].throttle_seconds == pytest.approx(0.4)
    forwarded = parse_request_header(memoryview(plan.frame))
    assert (forwarded.api_key, forwarded.api_version, forwarded.correlation_id, forwarded.client_id) == \
        (ApiKey.CreateTopics, 7, 7, "admin")
    assert struct.unpack_from(">i", plan.frame, 0)[0] == len(plan.frame) - 4
    split = CreateTopicsRequest.decode(bytes(memoryview(plan.frame)[forwarded.body_offset:]), version=7)
    assert [t.name for t in split.topics] == ["t0", "t1", "t2"]
    # The upstream answers the three (out of order, one already existing); kqp merges.
    upstream = CreateTopicsResponse(throttle_time_ms=0, topics=[
        create_result("t2", partitions=4), create_result("t0", partitions=4), create_result("t1", error=36)])
    body = bytes(upstream.encode(version=7))
    merged_frame = plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 4 + 5, clock.now)
    assert struct.unpack_from(">i", merged_frame, 0)[0] == len(merged_frame) - 4
    assert struct.unpack_from(">i", merged_frame, 4)[0] == 7
    merged = CreateTopicsResponse.decode(bytes(body_of(merged_frame, ApiKey.CreateTopics, 7)), version=7)
    assert [(t.name, t.error_code) for t in merged.topics] == \
        [("t0", 0), ("t1", 36), ("t2", 0), ("t3", THROTTLING_QUOTA_EXCEEDED)]
    # t1 already existed: not created, so its 4 mutations are refunded: -2 + 4 = 2.
    assert tokens(gate, clock) == pytest.approx(2)


def test_validate_only_is_not_counted() -> None:
    gate, clock = make_gate(rate=5, window_count=2)
    hdr, frame = create_topics(7, [50, 50], validate_only=True)
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.frame is frame and plan.violations == [] and plan.rewrite is None
    hdr, frame = create_topics(7, [1])
    gate.plan(ADMIN, hdr, frame, clock.now)
    assert tokens(gate, clock) == 9                     # only the real request: 10 - 1


def test_unlimited_principal_passes_but_keeps_the_cache() -> None:
    gate, clock = make_gate()
    hdr, frame = request(ApiKey.CreateTopics, 7, client_id="someone-else", correlation_id=1, timeout_ms=1000, topics=[
        Creatable(name="free0", num_partitions=3, replication_factor=1, assignments=[], configs=[])])
    plan = gate.plan(OTHER, hdr, frame, clock.now)
    assert plan.violations == [] and plan.answer is None and plan.frame is frame
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("free0", partitions=3)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 1, body), 9, clock.now)
    assert gate.topics.partitions("free0") == 3
    assert gate.quotas.snapshot(clock.now) == []    # nothing charged to anyone


def test_broker_default_partitions_are_estimated_then_settled() -> None:
    gate, clock = make_gate(rate=5, window_count=2)
    # num_partitions -1: charged Kafka's default of 1 (10 -> 9) until the v7 response says 6.
    hdr, frame = create_topics(7, [-1])
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert tokens(gate, clock) == 9
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("t0", partitions=6)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    assert tokens(gate, clock) == 4                     # 9 - (6 - 1)
    assert gate.topics.partitions("t0") == 6


# -- DeleteTopics and CreatePartitions need the topic cache --------------------------------------

def test_delete_unknown_topic_asks_for_a_lookup_first() -> None:
    gate, clock = make_gate()
    DeleteState = DeleteTopicsRequest.DeleteTopicState
    hdr, frame = request(ApiKey.DeleteTopics, 6, topics=[DeleteState(name="ghost", topic_id=None)], timeout_ms=1000)
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.needs_lookup and plan.answer is None and plan.rewrite is None
    # After the lookup the topic is still unknown, so it does not exist and costs nothing.
    plan = gate.plan(ADMIN, hdr, frame, clock.now, looked_up=True)
    assert not plan.needs_lookup and plan.violations == []
    assert tokens(gate, clock) == 500


def test_delete_by_name_and_by_id_costs_the_partitions_metadata_shows() -> None:
    gate, clock = make_gate(rate=5, window_count=2)    # B = 10
    ids = {"a": uuid.uuid4(), "b": uuid.uuid4()}
    feed_metadata(gate, 12, {"a": (4, ids["a"]), "b": (8, ids["b"])})
    DeleteState = DeleteTopicsRequest.DeleteTopicState
    hdr, frame = request(ApiKey.DeleteTopics, 6, timeout_ms=1000, topics=[
        DeleteState(name="a", topic_id=None), DeleteState(name=None, topic_id=ids["b"])])
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert not plan.needs_lookup and plan.violations == []
    assert tokens(gate, clock) == -2                    # 10 - 4 - 8
    Result = DeleteTopicsResponse.DeletableTopicResult
    body = bytes(DeleteTopicsResponse(throttle_time_ms=0, responses=[
        Result(name="a", topic_id=ids["a"], error_code=0, error_message=None),
        Result(name=None, topic_id=ids["b"], error_code=0, error_message=None)]).encode(version=6))
    plan.rewrite(response_frame(ApiKey.DeleteTopics, 6, 7, body), 9, clock.now)
    assert gate.topics.partitions("a") is None and gate.topics.partitions(None, ids["b"]) is None


def test_old_delete_topics_is_throttled_by_its_partitions() -> None:
    gate, clock = make_gate(rate=5, window_count=2)
    feed_metadata(gate, 9, {"big": (20, uuid.UUID(int=0))})
    hdr, frame = request(ApiKey.DeleteTopics, 4, topic_names=["big"], timeout_ms=1000)
    # 10 - 20 = -10: admitted (v4 knows no error 89), throttle 10 / 5 = 2 s.
    [violation] = gate.plan(ADMIN, hdr, frame, clock.now).violations
    assert violation.throttle_seconds == 2.0


def test_create_partitions_costs_the_increment() -> None:
    gate, clock = make_gate(rate=5, window_count=2)
    feed_metadata(gate, 12, {"grow": (3, uuid.uuid4())})
    Topic = CreatePartitionsRequest.CreatePartitionsTopic
    hdr, frame = request(ApiKey.CreatePartitions, 3, timeout_ms=1000, validate_only=False,
                         topics=[Topic(name="grow", count=9, assignments=None)])
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert tokens(gate, clock) == 4                     # 10 - (9 - 3)
    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    body = bytes(CreatePartitionsResponse(throttle_time_ms=0, results=[
        Result(name="grow", error_code=0, error_message=None)]).encode(version=3))
    plan.rewrite(response_frame(ApiKey.CreatePartitions, 3, 7, body), 9, clock.now)
    assert gate.topics.partitions("grow") == 9


# -- plumbing --------------------------------------------------------------------------------------

def test_inactive_gate_passes_everything_untouched() -> None:
    gate, clock = make_gate()
    gate.quotas.update_settings(QuotaSettings(window_count=100), clock.now)
    for hdr, frame in (create_topics(7, [80] * 7), request(ApiKey.Metadata, 12, topics=None)):
        plan = gate.plan(ADMIN, hdr, frame, clock.now)
        assert plan.frame is frame and plan.rewrite is None and plan.violations == [] and plan.answer is None
    assert GATED_APIS == {ApiKey.Metadata, ApiKey.CreateTopics, ApiKey.DeleteTopics, ApiKey.CreatePartitions}


async def test_failed_lookup_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    gate, _ = make_gate()
    # Nothing listens on 127.0.0.1:9 (discard): the lookup fails fast and says so.
    lookup = TopicLookup(gate.topics, lambda: HostPort("127.0.0.1", 9), lambda: {ApiKey.Metadata: (0, 12)},
                         1.0, 1 << 20)
    await asyncio.wait_for(lookup(), 5)
    assert "topic metadata lookup at 127.0.0.1:9 failed" in caplog.text
