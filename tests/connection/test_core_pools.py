"""Playbooks of the pools' proxy side: topic pools charge bytes per topic, adaptive pools hear answers.

Topic pools (issue 21): with windows of 1 s x 11 and a topic pool `events` of producer_byte_rate
1000 B/s, a fresh member's sampled rate measures over (11 - 1) x 1 s = 10 s, so a Produce carrying R
bytes of `events` records reads as R / 10 B/s and throttles for X = (R / 10 - 1000) / 1000 x 10 =
R / 1000 - 10 s; only the records' bytes of the pool's topics count (not the frame, not the other
topics'). Adaptive pools (issue 22): what each answered request of a member reports to its pool's
collector (latency per broker, units, the upstream's throttle, timeouts, disconnects), taken here
with `collector.take`.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from helpers.playbook import connected_core, fetch_request, play, produce_response, to_client, to_upstream, topic_cache
from helpers.quota_frames import record_batch
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import MuteReason
from kqp.quotas.model import QuotaType
from kqp.quotas.pools.adaptive import AdaptivePool
from kqp.quotas.pools.upstream_signals import WindowSignals

NOW = 100.0
WINDOWS = {"window_size_seconds": 1, "window_count": 11}
EVENTS_ID = uuid.UUID(int=0xE7E475)


def produce(correlation_id: int, client_id: str, topics: dict[str, int], version: int = 9) -> tuple[bytes, int]:
    """A Produce frame with `count` 1000-byte records per topic (by name, or by id from v13: `events`
    only), and the records bytes it carries to `events`."""
    part = ProduceRequest.TopicProduceData.PartitionProduceData
    data, events = [], 0
    for topic, count in topics.items():
        batch = record_batch(f"{client_id}{correlation_id}{topic}", count)
        events += len(batch) if topic == "events" else 0
        key = {"topic_id": EVENTS_ID} if version >= 13 else {"name": topic}
        data.append(ProduceRequest.TopicProduceData(partition_data=[part(index=0, records=batch)], **key))
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=data)
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True)), events


def topic_pool(quota: str = "producer_byte_rate", **more: object) -> dict:
    return {**WINDOWS, "pools": [{"name": "events", quota: 1000, "topics": ["events"], **more}]}


def x_of(events_bytes: int) -> float:
    return events_bytes / 1000 - 10


def test_a_topic_pool_charges_the_bytes_of_its_topics_only() -> None:
    core = connected_core(topic_pool())
    other, _ = produce(1, "c", {"other": 30})
    both, events = produce(2, "c", {"other": 30, "events": 30})
    x = x_of(events)   # ~20 s: the `other` records and the frame's overhead are not the pool's
    play(core, [
        (ev.ClientData(NOW, other), [to_upstream(other)]),     # 30 KB, none of it to `events`
        (ev.UpstreamData(NOW + 0.01, produce_response(9, 1)), [to_client(produce_response(9, 1))]),
        (ev.ClientData(NOW + 0.02, both),
         [to_upstream(both), ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + 0.02 + x))]),
    ])


def test_topics_named_by_id_are_looked_up_once_then_charged_by_name() -> None:
    core = connected_core(topic_pool())
    frame, events = produce(1, "c", {"events": 30}, version=13)
    play(core, [(ev.ClientData(NOW, frame), [ev.Mute(MuteReason.LOOKUP), ev.LookUpTopics()])])
    topic_cache(core).learn("events", 1, EVENTS_ID)   # what the lookup's Metadata answer teaches
    play(core, [(ev.TopicsLookedUp(NOW + 0.01),
                 [to_upstream(frame), ev.Mute(MuteReason.THROTTLED),
                  ev.SetTimer(pytest.approx(NOW + 0.01 + x_of(events))), ev.Unmute(MuteReason.LOOKUP)])])


def test_an_id_still_unknown_after_the_lookup_goes_through_uncharged() -> None:
    core = connected_core(topic_pool())
    frame, _ = produce(1, "c", {"events": 30}, version=13)
    core.handle(ev.ClientData(NOW, frame))
    play(core, [(ev.TopicsLookedUp(NOW + 0.01), [to_upstream(frame), ev.Unmute(MuteReason.LOOKUP)])])


def fetch_response(correlation_id: int, topics: dict[str, int], watermark: int = 0, throttle_ms: int = 0,
                   version: int = 12) -> bytes:
    """A Fetch response with `count` 1000-byte records (offsets 0..count-1) per topic, each topic's
    partition at high watermark `watermark` (default: count, all there is)."""
    data = FetchResponse.FetchableTopicResponse.PartitionData
    responses = [FetchResponse.FetchableTopicResponse(topic=topic, partitions=[data(
        partition_index=0, high_watermark=watermark or count, records=record_batch(topic, count))])
        for topic, count in topics.items()]
    body = FetchResponse(throttle_time_ms=throttle_ms, session_id=0, responses=responses).encode(version=version)
    head = struct.pack(">i", correlation_id) + b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + bytes(body)


def test_a_consumer_topic_pool_charges_a_fetch_response_and_empty_answers_refund_it() -> None:
    core = connected_core(topic_pool("consumer_byte_rate"), fetch_throttle="empty")
    ledger = core.wiring.charging.quotas.pools.ledgers[("events", QuotaType.CONSUMER_BYTE_RATE)]
    request = fetch_request(12, 1, "c")
    response = fetch_response(1, {"events": 30, "other": 10})
    core.handle(ev.ClientData(NOW, request))
    [send, *_] = core.handle(ev.UpstreamData(NOW + 0.01, response))
    # Over the pool (30 KB of `events` records against 1000 B/s): answered empty, and the charge
    # taken back, as Kafka's unrecordQuotaSensor does: the member's window shows nothing used.
    assert send.side is ev.Side.CLIENT and len(b"".join(send.parts)) < 100
    [member] = ledger.members.values()
    assert sum(member.used) == 0


def test_the_consumer_topic_pool_holds_the_next_fetch_until_the_response() -> None:
    core = connected_core(topic_pool("consumer_byte_rate"))
    request = fetch_request(12, 1, "c")
    play(core, [(ev.ClientData(NOW, request), [to_upstream(request), ev.Mute(MuteReason.RESPONSE_PENDING)])])


# -- adaptive pools ----------------------------------------------------------------------------------

ADAPTIVE = {"window_size_seconds": 0.2, "entities": [{"client_id_prefix": "job-"}],
            "pools": [{"name": "ingest", "producer_byte_rate": 10_000_000, "consumer_byte_rate": 10_000_000,
                       "members": [{"client_id_prefix": "job-"}], "adaptive": {"target_latency_ms": 100}}]}


def watched_core(node: int = 2) -> Connection:
    core = connected_core(ADAPTIVE)
    core.node_id = node   # as a broker listener's connection is built (the bootstrap's is None)
    return core


def pool_of(core: Connection, quota_type: QuotaType) -> AdaptivePool:
    return core.wiring.charging.quotas.pools.adaptive[("ingest", quota_type)]


def produce_answer(correlation_id: int, throttle_ms: int = 0, errors: tuple[int, ...] = (0,)) -> bytes:
    part = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    body = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=[
        part(index=i, error_code=e, base_offset=0) for i, e in enumerate(errors)])],
        throttle_time_ms=throttle_ms).encode(version=9)
    head = struct.pack(">i", correlation_id) + b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + bytes(body)


def taken(pool: AdaptivePool) -> WindowSignals:
    return pool.collector.take(0.2)


def test_a_members_produce_reports_its_latency_units_and_the_upstreams_throttle() -> None:
    core = watched_core()
    pool = pool_of(core, QuotaType.PRODUCER_BYTE_RATE)
    frame, _ = produce(1, "job-a-1", {"t": 4})
    core.handle(ev.ClientData(NOW, frame))
    core.handle(ev.UpstreamData(NOW + 0.05, produce_answer(1, throttle_ms=30)))
    signals = taken(pool)
    assert list(signals.latency) == [2]                       # broker 2, one sample of 50 ms (within 9%)
    assert signals.latency[2].quantile(0.5) == pytest.approx(0.05, rel=0.1)
    assert signals.delivered == len(frame) - 4                 # the request's bytes, as its quota counts them
    assert (signals.throttled, signals.timeouts, signals.disconnects) == (1, 0, 0)


def test_timed_out_partitions_and_a_lost_upstream_are_signals() -> None:
    core = watched_core()
    pool = pool_of(core, QuotaType.PRODUCER_BYTE_RATE)
    core.handle(ev.ClientData(NOW, produce(1, "job-a-1", {"t": 1})[0]))
    core.handle(ev.UpstreamData(NOW + 0.05, produce_answer(1, errors=(7, 0, 7))))
    core.handle(ev.ClientData(NOW + 0.1, produce(2, "job-a-1", {"t": 1})[0] + produce(3, "job-a-1", {"t": 1})[0]))
    core.handle(ev.UpstreamLost(NOW + 0.2, "reset"))
    signals = taken(pool)
    assert (signals.timeouts, signals.disconnects) == (2, 1)   # one disconnect, however many were in flight


def test_requests_from_outside_the_pool_report_nothing() -> None:
    core = watched_core()
    pool = pool_of(core, QuotaType.PRODUCER_BYTE_RATE)
    core.handle(ev.ClientData(NOW, produce(1, "bystander", {"t": 1})[0]))
    core.handle(ev.UpstreamData(NOW + 0.05, produce_answer(1, throttle_ms=30)))
    core.handle(ev.UpstreamLost(NOW + 0.2, "reset"))
    assert pool.collector.empty


@pytest.mark.parametrize(("watermark", "latency"), [(10, None), (50, 0.3)])
def test_a_fetch_is_latency_only_when_the_broker_had_more_to_give(watermark: int, latency: float | None) -> None:
    """10 records returned (offsets 0..9): at high watermark 10 that was all there was, so the broker
    may have waited on max_wait_ms; at 50 it answered with more to give: 300 ms is its latency."""
    core = watched_core()
    pool = pool_of(core, QuotaType.CONSUMER_BYTE_RATE)
    core.handle(ev.ClientData(NOW, fetch_request(12, 1, "job-b-1")))
    response = fetch_response(1, {"t": 10}, watermark=watermark)
    core.handle(ev.UpstreamData(NOW + 0.3, response))
    signals = taken(pool)
    assert signals.delivered == len(response) - 9 + 4          # the body and 4, as Kafka's FetchResponse.sizeOf
    if latency is None:
        assert signals.latency == {}
    else:
        assert signals.latency[2].quantile(0.5) == pytest.approx(latency, rel=0.1)


def test_a_throttled_member_is_still_answered_and_reported() -> None:
    """An adaptive pool at its floor (1% of 10 MB/s = 100 kB/s, a token bucket of 100 kB/s x 0.2 s x 11
    = 220 kB): 300 kB in one request is over it; the request is still watched like any other."""
    core = watched_core()
    pool = pool_of(core, QuotaType.PRODUCER_BYTE_RATE)
    frame, _ = produce(1, "job-a-1", {"t": 300})
    actions = core.handle(ev.ClientData(NOW, frame))
    assert actions[:2] == [to_upstream(frame), ev.Mute(MuteReason.THROTTLED)]
    core.handle(ev.UpstreamData(NOW + 0.05, produce_answer(1)))
    assert taken(pool).delivered == len(frame) - 4


def test_metadata_answers_teach_the_topic_cache_ids_while_a_topic_pool_exists() -> None:
    from kafka.protocol.metadata import MetadataResponse

    core = connected_core(topic_pool())
    request = encode_request(ApiKey.Metadata, 12, 1, "c", topics=None, allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)
    core.handle(ev.ClientData(NOW, request))
    topic = MetadataResponse.MetadataResponseTopic(error_code=0, name="events", topic_id=EVENTS_ID, is_internal=False,
                                                  partitions=[], authorized_operations=set())
    body = MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1,
                            topics=[topic]).encode(version=12)
    head = struct.pack(">i", 1) + b"\x00"
    core.handle(ev.UpstreamData(NOW + 0.01, struct.pack(">i", len(head) + len(body)) + head + bytes(body)))
    assert topic_cache(core).name(EVENTS_ID) == "events"


def test_a_members_produce_is_pending_until_answered_or_its_connection_closes() -> None:
    """The pool's stall signal (pools/adaptive.py) reads the oldest unanswered Produce: an answer, a
    client gone or an upstream lost each end the wait; only the upstream lost is a disconnect."""
    pool = pool_of(core := watched_core(), QuotaType.PRODUCER_BYTE_RATE)
    core.handle(ev.ClientData(NOW, produce(1, "job-a-1", {"t": 1})[0]))
    assert list(pool.pending.values()) == [NOW]
    core.handle(ev.UpstreamData(NOW + 0.05, produce_answer(1)))
    assert pool.pending == {}
    for lost, disconnects in ((ev.ClientLost(NOW + 0.2), 0), (ev.UpstreamLost(NOW + 0.2, "reset"), 1)):
        pool = pool_of(core := watched_core(), QuotaType.PRODUCER_BYTE_RATE)
        core.handle(ev.ClientData(NOW + 0.1, produce(2, "job-a-1", {"t": 1})[0]))
        assert len(pool.pending) == 1
        core.handle(lost)
        assert pool.pending == {} and taken(pool).disconnects == disconnects
