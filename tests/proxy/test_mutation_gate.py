"""MutationGate: KIP-599 per-topic admission, split/merge, costs and the topic cache, pure.

No sockets and no sleeps: the gate gets a real QuotaManager and topic cache, a clock that is a
number the test moves, and request/response frames encoded with kafka-python's message classes. The
gate names charges and `Charging` makes them, as for the core's mutation handlers (`ChargedGate`).
Unless a test says otherwise the quota is KIP-599's worked example: Q = 5 mutations/s, 100 windows
of 1 s, so the bucket's rate R = 5 and burst B = Q * S * W = 500.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from helpers.net import free_port
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from kqp.config.model import HostPort
from kqp.protocol.apis import ApiKey
from kqp.protocol.headers import encode_response_header, parse_request_header
from kqp.protocol.messages import encode_request
from kqp.protocol.mutations import THROTTLING_QUOTA_EXCEEDED
from kqp.proxy.connection.charging import Charging
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.connection.plans import Flight, Plan, Progress, Reply
from kqp.proxy.policies.mutation_gate import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    GATED_APIS,
    MutationGate,
    Rewrite,
)
from kqp.proxy.policies.topic_metadata import TopicMetadata
from kqp.proxy.runtime.topic_lookup import TopicLookup
from kqp.quotas.manager import QuotaManager, Violation
from kqp.quotas.model import EntitySpec, Principal, QuotaSettings

ADMIN = Principal("ANONYMOUS", "admin")
OTHER = Principal("ANONYMOUS", "someone-else")
Creatable = CreateTopicsRequest.CreatableTopic


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


KINDS = {ApiKey.CreateTopics: CREATE_TOPICS, ApiKey.DeleteTopics: DELETE_TOPICS,
         ApiKey.CreatePartitions: CREATE_PARTITIONS}


@dataclass
class MutationPlan:
    """A gate's plan with its charges made: the violations they gave, and a rewrite that makes what
    the answer settles."""

    frame: memoryview | bytes
    violations: list[Violation]
    rewrite: Any
    answer: bytes | None
    needs_lookup: bool


class ChargedGate:
    """The gate as the core drives it: each request planned by its API's handler (Metadata, or a
    mutation with its `MutationKind`), and the plan's charges made by `Charging`."""

    def __init__(self, gate: MutationGate) -> None:
        self.gate, self.quotas, self.topics = gate, gate.quotas, gate.topics
        self.charging = Charging(gate.quotas, ProxyObserver())

    def plan(self, principal: Principal, hdr: Any, frame: memoryview, now: float,
             looked_up: bool = False) -> MutationPlan:
        if hdr.api_key == ApiKey.Metadata:
            gated = self.gate.metadata(principal, hdr, frame, now, looked_up)
        else:
            gated = self.gate.plan(KINDS[hdr.api_key], principal, hdr, frame, now, looked_up)
        if gated.needs_lookup:
            return MutationPlan(gated.frame, [], None, None, True)
        flight = Flight(hdr.correlation_id, hdr.api_key, hdr.api_version, principal, now,
                        Plan(mutations=gated.charges, exempt=True), Progress())
        violations = self.charging.charge_request(flight, now)
        rewrite = None if gated.rewrite is None else self._settling(flight, gated.rewrite)
        return MutationPlan(gated.frame, violations, rewrite, gated.answer, False)

    def _settling(self, flight: Flight, rewrite: Rewrite) -> Any:
        def settle(response: memoryview, body_offset: int, now: float) -> memoryview | bytes:
            whole, settled = rewrite(response, body_offset, now)
            self.charging.charge_reply(flight, Reply((whole,), mutations=settled), now)
            return whole

        return settle


def make_gate(rate: float = 5, window_count: int = 100, window_size: float = 1.0) -> tuple[ChargedGate, Clock]:
    clock = Clock()
    settings = QuotaSettings(window_size_seconds=window_size, window_count=window_count,
                             entities={EntitySpec(None, "admin"): {"controller_mutation_rate": rate}})
    return ChargedGate(MutationGate(QuotaManager(settings, 0.0), TopicMetadata())), clock


def request(api: int, version: int, client_id: str = "admin", correlation_id: int = 7, **fields: Any):
    frame = memoryview(encode_request(api, version, correlation_id, client_id, **fields))
    return parse_request_header(frame), frame


def create_topics(version: int, partitions: list[int] | dict[str, int], validate_only: bool = False,
                  prefix: str = "t", **header: Any):
    """CreateTopics for `partitions` (named `prefix`0, 1, ... from a list), -1 asking for the broker's
    default count and replication factor."""
    named = partitions if isinstance(partitions, dict) else {f"{prefix}{i}": n for i, n in enumerate(partitions)}
    topics = [Creatable(name=name, num_partitions=n, replication_factor=-1 if n == -1 else 1, assignments=[],
                        configs=[]) for name, n in named.items()]
    return request(ApiKey.CreateTopics, version, topics=topics, timeout_ms=1000, validate_only=validate_only,
                   **header)


def tokens(gate: ChargedGate, clock: Clock) -> float:
    left = gate.quotas.mutation_tokens(ADMIN, clock.now)
    assert left is not None
    return left


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


def metadata_body(version: int, topics: dict[str, tuple[int | None, uuid.UUID]]) -> bytes:
    """A Metadata response; a topic whose count is None is answered UNKNOWN_TOPIC_OR_PARTITION."""
    Topic = MetadataResponse.MetadataResponseTopic
    Partition = Topic.MetadataResponsePartition
    response = MetadataResponse(version=version, throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=1,
                                topics=[Topic(error_code=0 if count is not None else 3, name=name, topic_id=topic_id,
                                              is_internal=False,
                                              partitions=[Partition(error_code=0, partition_index=p, leader_id=1,
                                                                    leader_epoch=0, replica_nodes=[1], isr_nodes=[1],
                                                                    offline_replicas=[]) for p in range(count or 0)])
                                        for name, (count, topic_id) in topics.items()])
    return bytes(response.encode(version=version))


def decide(gate: ChargedGate, hdr: Any, frame: memoryview, now: float, principal: Principal = ADMIN) -> MutationPlan:
    """Plan as the core does: when the gate asks for a topic lookup, plan again once it has run
    (the lookup adds nothing here: the cache already holds what the test put in it)."""
    plan = gate.plan(principal, hdr, frame, now)
    return gate.plan(principal, hdr, frame, now, looked_up=True) if plan.needs_lookup else plan


def feed_metadata(gate: ChargedGate, version: int, topics: dict[str, tuple[int | None, uuid.UUID]],
                  now: float = 0.0) -> None:
    hdr, frame = request(ApiKey.Metadata, version, topics=None)
    answer_metadata(gate.plan(ADMIN, hdr, frame, now), version, topics, now)


def answer_metadata(plan: MutationPlan, version: int, topics: dict[str, tuple[int | None, uuid.UUID]],
                    now: float) -> None:
    assert plan.rewrite is not None
    body = metadata_body(version, topics)
    response = response_frame(ApiKey.Metadata, version, 7, body)
    assert plan.rewrite(response, len(response) - len(body), now) is response


def metadata_request(names: list[str], allow: bool = True, client_id: str = "admin"):
    Topic = MetadataRequest.MetadataRequestTopic
    return request(ApiKey.Metadata, 12, client_id=client_id, topics=[Topic(name=n, topic_id=None) for n in names],
                   allow_auto_topic_creation=allow, include_topic_authorized_operations=False)


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
    # The next CreateTopics meets K = -60: it would get 89, and kqp does not know whether "next0"
    # exists (which would make it 36, no tokens): it asks for a lookup first.
    hdr, frame = create_topics(7, [1], prefix="next")
    assert gate.plan(ADMIN, hdr, frame, clock.now).needs_lookup
    # Still unknown after it, so new: answered by kqp alone with error 89, throttle -K/R = 60 / 5 = 12 s.
    plan = gate.plan(ADMIN, hdr, frame, clock.now, looked_up=True)
    assert plan.answer is not None
    [violation] = plan.violations
    assert violation.throttle_seconds == 12.0
    answer = CreateTopicsResponse.decode(bytes(body_of(plan.answer, ApiKey.CreateTopics, 7)), version=7)
    assert answer.throttle_time_ms == 12_000
    assert [(t.name, t.error_code) for t in answer.topics] == [("next0", THROTTLING_QUOTA_EXCEEDED)]
    assert struct.unpack_from(">i", plan.answer, 4)[0] == 7     # the client's correlation id
    # At 11.5 s K = -60 + 57.5 = -2.5: still rejected, for 2.5 / 5 = 0.5 s.
    clock.now = 11.5
    plan = decide(gate, hdr, frame, clock.now)
    assert plan.answer is not None and plan.violations[0].throttle_seconds == pytest.approx(0.5)
    # At 12 s K = 0: admitted again (and K = -1), without a lookup: nothing would get 89.
    clock.now = 12.0
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.answer is None and plan.violations == []
    assert tokens(gate, clock) == -1


def test_kip599_example_permissive_old_version() -> None:
    gate, clock = make_gate()
    # CreateTopics v5 cannot carry error 89: the 560 mutations are admitted and the response is
    # throttled by -K/R = 12 s instead (after a lookup: an existing topic would cost nothing).
    hdr, frame = create_topics(5, [80] * 7)
    plan = decide(gate, hdr, frame, clock.now)
    assert plan.answer is None and plan.frame is frame
    [violation] = plan.violations
    assert violation.throttle_seconds == 12.0
    # A later old-version request is admitted too, and throttled by its own debt: K = -60 - 5 at
    # T = 0 gives 65 / 5 = 13 s.
    hdr, frame = create_topics(5, [5], prefix="more")
    assert decide(gate, hdr, frame, clock.now).violations[0].throttle_seconds == 13.0


# -- split and merge ---------------------------------------------------------------------------

def test_strict_split_forwards_admitted_and_merges_in_client_order() -> None:
    gate, clock = make_gate(rate=5, window_count=2)      # B = 5 * 2 * 1 = 10 tokens
    # 4 topics of 4 partitions: 10 -> 6 -> 2 -> -2 (third admitted at K = 2), fourth rejected at
    # K = -2 with throttle 2 / 5 = 0.4 s.
    hdr, frame = create_topics(7, [4, 4, 4, 4])
    plan = decide(gate, hdr, frame, clock.now)
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
    # t1 existed behind the lookup's back: not created, so its 4 mutations are refunded: -2 + 4 = 2.
    assert tokens(gate, clock) == pytest.approx(2)


def test_validate_only_is_charged_like_the_real_thing() -> None:
    """The KRaft controller applies the quota in createTopic / createPartitions, before
    validate_only drops the result's records: a validation costs what the creation would."""
    gate, clock = make_gate(rate=5, window_count=2)     # B = 10
    # [50, 50]: t0 admitted at K = 10 (K = -40), t1 meets K = -40: 89, throttle 40 / 5 = 8 s.
    hdr, frame = create_topics(7, [50, 50], validate_only=True)
    plan = decide(gate, hdr, frame, clock.now)
    assert plan.violations[0].throttle_seconds == 8.0
    split = CreateTopicsRequest.decode(bytes(memoryview(plan.frame)[hdr.body_offset:]), version=7)
    assert [t.name for t in split.topics] == ["t0"] and split.validate_only
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("t0", partitions=50)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    assert tokens(gate, clock) == -40                   # the validation stays charged
    assert gate.topics.partitions("t0") is None, "validated, not created"
    # CreatePartitions validate_only too: growing g from 2 to 5 costs 3 (at t = 10 s K = -40 + 50 = 10).
    clock.now = 10.0
    gate.topics.learn("g", 2)
    Topic = CreatePartitionsRequest.CreatePartitionsTopic
    hdr, frame = request(ApiKey.CreatePartitions, 3, timeout_ms=1000, validate_only=True,
                         topics=[Topic(name="g", count=5, assignments=None)])
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.frame is frame and tokens(gate, clock) == 7
    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    body = bytes(CreatePartitionsResponse(throttle_time_ms=0, results=[
        Result(name="g", error_code=0, error_message=None)]).encode(version=3))
    plan.rewrite(response_frame(ApiKey.CreatePartitions, 3, 7, body), 9, clock.now)
    assert gate.topics.partitions("g") == 2 and tokens(gate, clock) == 7


def test_unlimited_principal_passes_but_keeps_the_cache() -> None:
    gate, clock = make_gate()
    hdr, frame = create_topics(7, {"free0": 3}, client_id="someone-else", correlation_id=1)
    plan = gate.plan(OTHER, hdr, frame, clock.now)
    assert plan.violations == [] and plan.answer is None and plan.frame is frame
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("free0", partitions=3)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 1, body), 9, clock.now)
    assert gate.topics.partitions("free0") == 3
    assert gate.quotas.snapshot(clock.now) == []    # nothing charged to anyone


def test_broker_default_partitions_are_learned_from_the_first_answer() -> None:
    """num_partitions -1 takes the controller's num.partitions, which kqp learns from CreateTopics
    answers (v5+ report each topic's count): the first such topic is charged Kafka's default of 1
    and settled, later ones are charged the real count when they come in."""
    gate, clock = make_gate(rate=5, window_count=4)     # B = 5 x 4 x 1 = 20
    hdr, frame = create_topics(7, [-1])
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert tokens(gate, clock) == 19                    # 20 - 1
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("t0", partitions=6)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    assert tokens(gate, clock) == 14                    # 19 - (6 - 1)
    assert gate.topics.partitions("t0") == 6 and gate.topics.default_partitions == 6
    # The next default topic costs 6 at once: 14 - 6 = 8, and its answer changes nothing.
    hdr, frame = create_topics(7, [-1], prefix="u")
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert tokens(gate, clock) == 8
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("u0", partitions=6)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    assert tokens(gate, clock) == 8


def test_the_default_is_learned_from_anyone_s_answer_and_not_from_manual_assignments() -> None:
    gate, clock = make_gate()
    # An unlimited principal's topic with -1 teaches the default too (nothing is charged to it).
    hdr, frame = create_topics(7, {"free": -1}, client_id="someone-else")
    plan = gate.plan(OTHER, hdr, frame, clock.now)
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("free", partitions=3)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    assert gate.topics.default_partitions == 3
    # A manual assignment also sends -1, but its count is the assignments', not the default.
    Assignment = Creatable.CreatableReplicaAssignment
    hdr, frame = request(ApiKey.CreateTopics, 7, timeout_ms=1000, topics=[Creatable(
        name="manual", num_partitions=-1, replication_factor=-1, configs=[],
        assignments=[Assignment(partition_index=p, broker_ids=[1]) for p in range(5)])])
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert tokens(gate, clock) == 495
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("manual", partitions=5)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    assert gate.topics.default_partitions == 3


# -- the broker's own errors come first (strict mode) ----------------------------------------------

def drain(gate: MutationGate, clock: Clock, partitions: int) -> None:
    """Spend tokens with a topic of `partitions`, created and known to the cache."""
    hdr, frame = create_topics(7, [partitions], prefix=f"drain{partitions}-")
    assert gate.plan(ADMIN, hdr, frame, clock.now).violations == []
    gate.topics.learn(f"drain{partitions}-0", partitions)


def entries(frame: bytes | memoryview, api: int, version: int) -> list[tuple[str | None, int, str | None]]:
    cls = {ApiKey.CreateTopics: CreateTopicsResponse, ApiKey.DeleteTopics: DeleteTopicsResponse,
           ApiKey.CreatePartitions: CreatePartitionsResponse}[api]
    decoded = cls.decode(bytes(body_of(frame, api, version)), version=version)
    field = {ApiKey.CreateTopics: "topics", ApiKey.DeleteTopics: "responses", ApiKey.CreatePartitions: "results"}[api]
    results = getattr(decoded, field)
    return [(r.name, r.error_code, r.error_message) for r in results]


def test_create_if_not_exists_never_sees_89_while_the_bucket_is_negative() -> None:
    gate, clock = make_gate(rate=5, window_count=2)     # B = 10
    gate.topics.learn("orders", 3)
    drain(gate, clock, 30)                              # K = 10 - 30 = -20: throttle 4 s
    # ReplicationControlManager.createTopics marks existing topics TOPIC_ALREADY_EXISTS before
    # createTopic (where the quota is) ever runs: 36, no tokens, no throttle, whatever K is. With
    # nothing over quota the request goes upstream untouched, and the upstream says 36 itself.
    hdr, frame = create_topics(7, {"orders": 3})
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert not plan.needs_lookup and plan.frame is frame and plan.violations == [] and plan.answer is None
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("orders", error=36)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    assert tokens(gate, clock) == -20                   # nothing spent, nothing refunded


def test_refusals_and_89s_are_answered_together_in_client_order() -> None:
    gate, clock = make_gate(rate=5, window_count=2)     # B = 10
    gate.topics.learn("orders", 3)
    drain(gate, clock, 30)                              # K = -20
    # [orders (exists), zero (num_partitions 0), new]: the first two are the broker's own errors,
    # spending nothing; "new" meets K = -20: 89, throttle 20 / 5 = 4 s. Nothing is admitted, so kqp
    # answers alone (all three names were decided: no lookup; "new" after one).
    hdr, frame = create_topics(7, {"orders": 3, "zero": 0, "new": 1})
    assert gate.plan(ADMIN, hdr, frame, clock.now).needs_lookup     # "new" may exist: it would be 36
    plan = gate.plan(ADMIN, hdr, frame, clock.now, looked_up=True)
    assert plan.answer is not None and plan.violations[0].throttle_seconds == 4.0
    assert entries(plan.answer, ApiKey.CreateTopics, 7) == [
        ("orders", 36, "Topic 'orders' already exists."),
        ("zero", 37, "Number of partitions was set to an invalid non-positive value."),
        ("new", THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")]
    assert tokens(gate, clock) == -20


def test_a_refused_topic_spends_nothing_that_a_later_topic_could_have_used() -> None:
    gate, clock = make_gate(rate=5, window_count=2)     # B = 10
    gate.topics.learn("orders", 3)
    # [big (12), orders (exists), after (2)]: big is admitted at K = 10 (K = -2); orders is refused
    # without touching K; after meets K = -2: 89 (throttle 0.4 s). Had orders been charged and
    # refunded later, nothing would differ here; had it been charged 3 before "after" ran, the
    # throttle would read 1 s.
    hdr, frame = create_topics(7, {"big": 12, "orders": 3, "after": 2})
    plan = decide(gate, hdr, frame, clock.now)
    assert plan.violations[0].throttle_seconds == pytest.approx(0.4)
    split = CreateTopicsRequest.decode(bytes(memoryview(plan.frame)[hdr.body_offset:]), version=7)
    assert [t.name for t in split.topics] == ["big"]          # only the admitted topic goes upstream
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("big", partitions=12)])
                 .encode(version=7))
    merged = plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    assert [(n, e) for n, e, _ in entries(merged, ApiKey.CreateTopics, 7)] == \
        [("big", 0), ("orders", 36), ("after", THROTTLING_QUOTA_EXCEEDED)]
    assert tokens(gate, clock) == -2


def test_a_topic_the_cache_does_not_know_is_looked_up_only_when_it_matters() -> None:
    gate, clock = make_gate(rate=5, window_count=2)     # B = 10
    # Within quota: a topic kqp does not know is taken to be new; if it exists the upstream says
    # 36 and the charge is refunded (the bucket ends as the broker's would).
    hdr, frame = create_topics(7, [4], prefix="maybe")
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert not plan.needs_lookup and tokens(gate, clock) == 6
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("maybe0", error=36)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    assert tokens(gate, clock) == 10
    # Over quota, the same question decides between 36 and 89: asked. Here the lookup finds it.
    drain(gate, clock, 30)                              # K = -20
    assert gate.plan(ADMIN, hdr, frame, clock.now).needs_lookup
    gate.topics.learn("maybe0", 4)                      # what the lookup learned
    plan = gate.plan(ADMIN, hdr, frame, clock.now, looked_up=True)
    assert plan.frame is frame and plan.violations == [], "36 from the upstream, not 89 from kqp"


def test_delete_of_a_missing_topic_gets_3_not_89() -> None:
    gate, clock = make_gate(rate=5, window_count=2)     # B = 10
    gate.topics.learn("real", 4)
    drain(gate, clock, 30)                              # K = -20
    DeleteState = DeleteTopicsRequest.DeleteTopicState
    hdr, frame = request(ApiKey.DeleteTopics, 6, timeout_ms=1000, topics=[
        DeleteState(name="ghost", topic_id=None), DeleteState(name=None, topic_id=uuid.UUID(int=5)),
        DeleteState(name="real", topic_id=None)])
    # ghost and the id: unknown, so looked up; still unknown after: ControllerApis.deleteTopics
    # answers 3 (by name) and 100 (by id) before the controller's quota. real meets K = -20: 89.
    assert gate.plan(ADMIN, hdr, frame, clock.now).needs_lookup
    plan = gate.plan(ADMIN, hdr, frame, clock.now, looked_up=True)
    assert plan.answer is not None and plan.violations[0].throttle_seconds == 4.0
    assert entries(plan.answer, ApiKey.DeleteTopics, 6) == [
        ("ghost", 3, "This server does not host this topic-partition."),
        (None, 100, "This server does not host this topic ID."),
        ("real", THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")]
    # Alone, the missing topic goes upstream untouched (nothing over quota) and costs nothing.
    hdr, frame = request(ApiKey.DeleteTopics, 6, timeout_ms=1000, topics=[DeleteState(name="ghost", topic_id=None)])
    plan = decide(gate, hdr, frame, clock.now)
    assert plan.frame is frame and plan.violations == [] and tokens(gate, clock) == -20


def test_create_partitions_not_above_the_current_count_gets_37() -> None:
    gate, clock = make_gate(rate=5, window_count=2)     # B = 10
    gate.topics.learn("grow", 3)
    drain(gate, clock, 30)                              # K = -20
    Topic = CreatePartitionsRequest.CreatePartitionsTopic
    hdr, frame = request(ApiKey.CreatePartitions, 3, timeout_ms=1000, validate_only=False, topics=[
        Topic(name="grow", count=3, assignments=None), Topic(name="grow-more", count=8, assignments=None)])
    gate.topics.learn("grow-more", 4)
    # grow to 3 = its count: 37; grow-more 4 -> 8 meets K = -20: 89.
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert entries(plan.answer, ApiKey.CreatePartitions, 3) == [
        ("grow", 37, "Topic already has 3 partition(s)."),
        ("grow-more", THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")]


def test_permissive_versions_do_not_charge_refused_topics() -> None:
    gate, clock = make_gate(rate=5, window_count=2)     # B = 10
    gate.topics.learn("orders", 30)
    # CreateTopics v5: everything goes upstream and is recorded, but orders exists and zero is
    # invalid: the broker records neither. new costs 4: K = 10 - 4 = 6, no throttle (had orders
    # been charged its 30, K = -24 and a 4.8 s throttle).
    hdr, frame = create_topics(5, {"orders": 30, "zero": 0, "new": 4})
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.frame is frame and plan.violations == [] and tokens(gate, clock) == 6


def test_a_topic_the_cache_misjudged_is_charged_when_the_upstream_creates_it() -> None:
    gate, clock = make_gate(rate=5, window_count=2)     # B = 10
    gate.topics.learn("stale", 2)                       # deleted behind kqp's back since
    hdr, frame = create_topics(7, {"stale": 5})
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.frame is frame and tokens(gate, clock) == 10      # refused as existing: 0
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("stale", partitions=5)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    # The upstream created it: the broker would have charged its 5 partitions, so kqp does now.
    assert tokens(gate, clock) == 5 and gate.topics.partitions("stale") == 5


# -- DeleteTopics and CreatePartitions need the topic cache --------------------------------------

def test_delete_unknown_topic_asks_for_a_lookup_first() -> None:
    gate, clock = make_gate()
    DeleteState = DeleteTopicsRequest.DeleteTopicState
    hdr, frame = request(ApiKey.DeleteTopics, 6, topics=[DeleteState(name="ghost", topic_id=None)], timeout_ms=1000)
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    assert plan.needs_lookup and plan.answer is None and plan.rewrite is None
    # After the lookup the topic is still unknown, so it does not exist and costs nothing; nothing
    # is over quota, so the upstream answers it (UNKNOWN_TOPIC_OR_PARTITION) itself.
    plan = gate.plan(ADMIN, hdr, frame, clock.now, looked_up=True)
    assert not plan.needs_lookup and plan.violations == [] and plan.frame is frame
    assert gate.quotas.mutation_tokens(ADMIN, clock.now) == 500


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


# -- topics auto-created through Metadata --------------------------------------------------------

def test_an_auto_created_topic_is_charged_to_the_requester_permissively() -> None:
    """KafkaApis.getTopicMetadata has a topic that does not exist auto-created on a
    PermissiveControllerMutationQuota for the requester; the Metadata response itself is throttled
    only for request quotas. B = 10."""
    gate, clock = make_gate(rate=5, window_count=2)
    hdr, frame = metadata_request(["auto"])
    # kqp does not know "auto": did it exist? Only a lookup says (an existing topic costs nothing).
    assert gate.plan(ADMIN, hdr, frame, clock.now).needs_lookup
    plan = gate.plan(ADMIN, hdr, frame, clock.now, looked_up=True)
    assert plan.frame is frame and plan.violations == []
    # It comes back with 4 partitions: this request created them. K = 10 - 4 = 6.
    answer_metadata(plan, 12, {"auto": (4, uuid.uuid4())}, clock.now)
    assert tokens(gate, clock) == 6 and gate.topics.partitions("auto") == 4
    # Permissive: a 12-partition auto-creation is recorded even past the quota, K = -6, and the
    # Metadata response is not throttled for it...
    hdr, frame = metadata_request(["auto", "bigger"])
    plan = decide(gate, hdr, frame, clock.now)
    assert plan.violations == []
    answer_metadata(plan, 12, {"auto": (4, uuid.uuid4()), "bigger": (12, uuid.uuid4())}, clock.now)
    assert tokens(gate, clock) == -6, "auto existed already: only bigger is charged"
    # ...but the requester's next mutation meets the debt: 89, throttle 6 / 5 = 1.2 s.
    hdr, frame = create_topics(7, [1])
    assert decide(gate, hdr, frame, clock.now).violations[0].throttle_seconds == pytest.approx(1.2)


def test_metadata_that_cannot_create_anything_needs_no_lookup() -> None:
    gate, clock = make_gate()
    gate.topics.learn("known", 3)
    for hdr, frame in (metadata_request(["known"]), metadata_request(["unknown"], allow=False),
                       request(ApiKey.Metadata, 12, topics=None, allow_auto_topic_creation=True,
                               include_topic_authorized_operations=False)):
        assert not gate.plan(ADMIN, hdr, frame, clock.now).needs_lookup
    # Nor does a requester without a mutation quota: there is nothing to charge it.
    hdr, frame = metadata_request(["unknown"], client_id="someone-else")
    assert not gate.plan(OTHER, hdr, frame, clock.now).needs_lookup


def test_a_metadata_request_kqp_cannot_read_goes_on_uncharged() -> None:
    gate, clock = make_gate()
    hdr, frame = metadata_request(["some"])
    cut = memoryview(bytes(frame[:hdr.body_offset + 3]))      # the topic array cut short
    plan = gate.plan(ADMIN, parse_request_header(cut), cut, clock.now)
    assert plan.frame is cut and not plan.needs_lookup and plan.rewrite is not None


def test_an_auto_creation_that_shows_up_later_is_charged_to_whoever_asked() -> None:
    """A KRaft broker answers UNKNOWN_TOPIC_OR_PARTITION and has the controller create the topic
    meanwhile (AutoTopicCreationManager); a ZooKeeper one answers LEADER_NOT_AVAILABLE. The topic
    is charged when it shows up, in anyone's answer, to the request that asked for it."""
    gate, clock = make_gate(rate=5, window_count=2)
    hdr, frame = metadata_request(["later"])
    plan = decide(gate, hdr, frame, clock.now)
    answer_metadata(plan, 12, {"later": (None, uuid.UUID(int=0))}, clock.now)
    assert tokens(gate, clock) == 10
    # Asked again: awaited already, so no second lookup (and no double charge).
    assert not gate.plan(ADMIN, hdr, frame, clock.now).needs_lookup
    # It shows up in another client's all-topics answer with 3 partitions: charged to admin.
    clock.now = 0.5
    feed_metadata(gate, 12, {"later": (3, uuid.uuid4())}, clock.now)
    assert tokens(gate, clock) == 7
    assert gate.quotas.mutation_tokens(OTHER, clock.now) is None


def test_an_auto_creation_is_awaited_for_a_request_timeout_only() -> None:
    gate, clock = make_gate(rate=5, window_count=2)
    hdr, frame = metadata_request(["never"])
    answer_metadata(decide(gate, hdr, frame, clock.now), 12, {"never": (None, uuid.UUID(int=0))}, clock.now)
    # The broker gives the controller request.timeout.ms (30 s) to create it; a topic of that name
    # appearing later was created by someone else.
    clock.now = 31.0
    feed_metadata(gate, 12, {"never": (5, uuid.uuid4())}, clock.now)
    assert tokens(gate, clock) == 10


def test_a_topic_created_by_create_topics_is_not_charged_again_as_auto_created() -> None:
    gate, clock = make_gate(rate=5, window_count=2)
    hdr, frame = metadata_request(["both"])
    answer_metadata(decide(gate, hdr, frame, clock.now), 12, {"both": (None, uuid.UUID(int=0))}, clock.now)
    hdr, frame = create_topics(7, {"both": 2})
    plan = gate.plan(ADMIN, hdr, frame, clock.now)
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[create_result("both", partitions=2)])
                 .encode(version=7))
    plan.rewrite(response_frame(ApiKey.CreateTopics, 7, 7, body), 9, clock.now)
    feed_metadata(gate, 12, {"both": (2, uuid.uuid4())}, clock.now)
    assert tokens(gate, clock) == 8                     # the CreateTopics' 2, once


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
    # Nothing listens on 127.0.0.1:9 (discard) nor on a port just freed: each broker is tried in
    # turn, each fails fast, and the one warning names both.
    dead = free_port()
    lookup = TopicLookup(gate.topics, lambda: [HostPort("127.0.0.1", 9), HostPort("127.0.0.1", dead)],
                         lambda: {ApiKey.Metadata: (0, 12)}, 1.0, 1 << 20)
    await asyncio.wait_for(lookup(), 5)
    assert "topic metadata lookup at 127.0.0.1:9 failed" in caplog.text
    assert f"at 127.0.0.1:{dead} failed" in caplog.text
