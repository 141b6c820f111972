"""Playbooks of KIP-219 in the connection core: answer at once, mute for the throttle, every version.

Quota arithmetic (Kafka's Rate over quota windows of 1 s x 11, producer_byte_rate 1000 B/s): a
fresh sensor measures over (11 - 1) x 1 s = 10 s, so one Produce frame of S bytes reads as S / 10
B/s and throttles for X = (S / 10 - 1000) / 1000 x 10 = S / 1000 - 10 seconds, S counted as Kafka
does, without the 4-byte size prefix (RequestChannel.Request.sizeInBytes); the 30-record
frames here are ~30.1 KB, so X is ~20 s. The handler-time clock of the playbook core never moves,
so request_percentage sees 0 and only the quotas a test names can throttle.
"""

from __future__ import annotations

import struct

import pytest
from helpers.playbook import (
    Recorder,
    connected_core,
    fetch_request,
    fetch_response,
    make_core,
    play,
    produce_frame,
    produce_response,
    throttle_of,
    to_client,
    to_upstream,
    topic_cache,
)
from kafka.protocol.admin.topics import CreatePartitionsRequest, CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.events import MuteReason, Side
from kqp.quotas.model import Principal

NOW = 100.0
BYTES = {"window_size_seconds": 1, "window_count": 11, "entities": [{"client_id": "c", "producer_byte_rate": 1000}]}


def x_of(frame: bytes) -> float:
    return (len(frame) - 4) / 1000 - 10


def probed(version: int, at: float, until: float) -> list[ev.Action]:
    """What follows a throttled Produce response sent at `at` in a mute lasting until `until`: a
    client of a version that backs off by itself (v6+) is probed halfway through what is left of the
    mute, its unread bytes noted now (backoff.py); an older one cannot back off: the timer stays at
    the mute's end."""
    if version >= 6:
        return [ev.NoteUnread(), ev.SetTimer(pytest.approx(at + (until - at) / 2))]
    return []


@pytest.mark.parametrize("version", [3, 5, 7, 9])
def test_over_quota_produce_is_answered_at_once_and_mutes_before_the_next(version: int) -> None:
    """KIP-219 for every version: v3-v5 clients do not back off by themselves, but the response is
    not held; their next request waits in the muted connection instead."""
    core = connected_core(BYTES)
    first, second = produce_frame("t", version, 1, "c"), produce_frame("t", version, 2, "c")
    x = x_of(first)
    play(core, [
        # The request's bytes are over quota already: it goes, and nothing more is read from now on.
        (ev.ClientData(NOW, first + second),
         [to_upstream(first), ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + x))]),
        # The response goes out as soon as it arrives, telling the whole throttle decided when the
        # request was read; the mute, from then, ends when that throttle does.
        (ev.UpstreamData(NOW + 0.01, produce_response(version, 1)),
         [to_client(produce_response(version, 1, throttle_ms=round(x * 1000))), *probed(version, NOW + 0.01, NOW + x)]),
    ])
    assert core.muted(Side.CLIENT) and core.throttling.muted_until == pytest.approx(NOW + x, abs=0.0006)
    assert core.handle(ev.TimerFired(NOW + x - 0.1)) == [ev.SetTimer(pytest.approx(NOW + x, abs=0.0006))]   # early
    actions = core.handle(ev.TimerFired(core.throttling.muted_until))
    assert actions[:2] == [ev.Unmute(MuteReason.THROTTLED), to_upstream(second)]
    assert actions[2] == ev.Mute(MuteReason.THROTTLED), "the second request is over quota too"


def test_a_produce_over_quota_is_a_muted_connection_from_the_request_on() -> None:
    """The mute that starts when an acks=1 Produce's bytes are read over quota is the throttle's: the
    observer hears it start, under its cause, at once (kqp_muted_connections counts the producer
    while it waits for its response), and end when the timer ends it. The throttle is counted as
    its response tells it: once per request, exactly as long as the connection is muted."""
    recorder = Recorder()
    core = connected_core(BYTES, observer=recorder)
    frame = produce_frame("t", 9, 1, "c")
    x = x_of(frame)
    play(core, [(ev.ClientData(NOW, frame),
                 [to_upstream(frame), ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + x))])])
    assert recorder.mutes == [("start", "c", "producer_byte_rate")] and recorder.throttles == []
    play(core, [(ev.UpstreamData(NOW + 0.01, produce_response(9, 1)),
                 [to_client(produce_response(9, 1, throttle_ms=round(x * 1000))), *probed(9, NOW + 0.01, NOW + x)])])
    assert recorder.mutes == [("start", "c", "producer_byte_rate")]
    assert recorder.throttles == [("c", "producer_byte_rate", round(x * 1000) / 1000)]
    assert core.throttling.muted_until == pytest.approx(NOW + round(x * 1000) / 1000)
    play(core, [(ev.TimerFired(NOW + x + 0.001), [ev.Unmute(MuteReason.THROTTLED)])])
    assert recorder.mutes == [("start", "c", "producer_byte_rate"), ("end", "c", "producer_byte_rate")]


def test_each_mute_carries_the_cause_of_the_throttle_that_holds_it() -> None:
    """request_rate 1/s and producer_byte_rate 1000 B/s over 2 windows of 1 s. The 2nd ApiVersions
    reads as 2 req/s: throttled (2 - 1) / 1 x 1 = 1 s under request_rate. Once that mute is over, a
    ~30 KB Produce reads as ~30 KB/s: muted again, under producer_byte_rate, not under the
    request_rate of the throttle before it."""
    recorder = Recorder()
    core = connected_core({"window_size_seconds": 1, "window_count": 2,
                           "entities": [{"client_id": "c", "request_rate": 1, "producer_byte_rate": 1000}]},
                          observer=recorder)
    core.handle(ev.ClientData(NOW, api_versions(1) + api_versions(2)))
    assert core.throttled and recorder.mutes == [("start", "c", "request_rate")]
    play(core, [(ev.TimerFired(NOW + 1.0), [ev.Unmute(MuteReason.THROTTLED)])])
    frame = produce_frame("t", 9, 3, "c")
    assert core.handle(ev.ClientData(NOW + 1.0, frame))[:2] == [to_upstream(frame), ev.Mute(MuteReason.THROTTLED)]
    assert recorder.mutes == [("start", "c", "request_rate"), ("end", "c", "request_rate"),
                              ("start", "c", "producer_byte_rate")]


def test_acks_zero_over_quota_is_muted_without_a_response() -> None:
    recorder = Recorder()
    core = make_core(BYTES, observer=recorder)
    core.handle(ev.ClientConnected(NOW))
    core.handle(ev.UpstreamConnected(NOW))
    first, second = produce_frame("t", 7, 1, "c", acks=0), produce_frame("t", 7, 2, "c", acks=0)
    x = x_of(first)
    play(core, [
        (ev.ClientData(NOW, first + second),
         [to_upstream(first), ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + x))]),
    ])
    assert not core.in_flight, "acks=0 owes no response"
    assert recorder.mutes == [("start", "c", "producer_byte_rate")]
    play(core, [(ev.TimerFired(NOW + x), [ev.Unmute(MuteReason.THROTTLED), to_upstream(second),
                                          ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + x + x))])])
    assert recorder.mutes == [("start", "c", "producer_byte_rate"), ("end", "c", "producer_byte_rate"),
                              ("start", "c", "producer_byte_rate")]


def test_acks_zero_is_exempt_from_request_quotas() -> None:
    """Kafka records no request-quota usage for acks=0 Produce (sendNoOpResponseExemptThrottle)."""
    core = connected_core({"window_size_seconds": 1, "window_count": 11,
                           "entities": [{"client_id": "c", "request_rate": 2}]})
    frames = [produce_frame("t", 7, i, "c", acks=0, records=1) for i in range(1, 61)]
    actions = core.handle(ev.ClientData(NOW, b"".join(frames)))
    assert actions == [to_upstream(f) for f in frames], "60 acks=0 requests must not be muted by request_rate"


def api_versions(correlation_id: int) -> bytes:
    """An ApiVersions v2 request from client c (an empty body): kqp answers it itself."""
    head = struct.pack(">hhih", ApiKey.ApiVersions, 2, correlation_id, 1) + b"c"
    return struct.pack(">i", len(head)) + head


def test_request_rate_throttles_kqps_own_answer_too() -> None:
    """request_rate 1/s over 2 windows of 1 s: Kafka's Rate measures a fresh sensor over the time
    elapsed plus one window, so the 2nd request, 0.2 s later, reads as 2 / 1.2 req/s, throttle
    X = 2 / 1 - 1.2 = 0.8 s (U / T - W)."""
    core = connected_core({"window_size_seconds": 1, "window_count": 2,
                           "entities": [{"client_id": "c", "request_rate": 1}]})
    [first] = core.handle(ev.ClientData(NOW, api_versions(1)))
    assert isinstance(first, ev.Send) and not core.throttled
    at = NOW + 0.2   # past the back-off probe's grace after the first answer (backoff.py)
    actions = core.handle(ev.ClientData(at, api_versions(2)))
    # Decided as it is read: muted until its throttle ends; the answer goes at once, telling it.
    assert [type(a) for a in actions] == [ev.Mute, ev.SetTimer, ev.Send, ev.NoteUnread, ev.SetTimer]
    assert struct.unpack_from(">i", b"".join(actions[2].parts), len(b"".join(actions[2].parts)) - 4)[0] == 800
    # ApiVersions v2 throttles itself (KIP-219): the timer first reads the back-off probe, at half the mute.
    assert actions[0] == ev.Mute(MuteReason.THROTTLED) and actions[4] == ev.SetTimer(pytest.approx(at + 0.4))
    assert core.throttling.muted_until == pytest.approx(at + 0.8)
    # Had it come within the grace, its client might only be refilling the slot the first answer
    # freed: that throttle (2 - 1.05 = 0.95 s) is not probed, and the timer is the mute's end.
    again = connected_core({"window_size_seconds": 1, "window_count": 2,
                            "entities": [{"client_id": "c", "request_rate": 1}]})
    again.handle(ev.ClientData(NOW, api_versions(1)))
    actions = again.handle(ev.ClientData(NOW + 0.05, api_versions(2)))
    assert actions[:2] == [ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + 1.0))]
    assert [type(a) for a in actions[2:]] == [ev.Send]


FETCH = {"window_size_seconds": 1, "window_count": 11, "entities": [{"client_id": "c", "consumer_byte_rate": 1000}]}


@pytest.mark.parametrize("mode", ["deliver", "empty"])
def test_over_quota_fetch_in_both_fetch_throttle_modes(mode: str) -> None:
    """consumer_byte_rate 1000 B/s: the request's max_bytes is capped at 1000 x 10 x 1 = 10000 (Kafka's
    getMaxValueInQuotaWindow); a response throttles for R / 1000 - 10 s, R its body + 4 bytes as Kafka
    counts it (FetchResponse.sizeOf): the frame less its size prefix, for header v0."""
    core = connected_core(FETCH, fetch_throttle=mode)
    forwarded, pending = core.handle(ev.ClientData(NOW, fetch_request(11, 1, "c")))
    assert forwarded == to_upstream(fetch_request(11, 1, "c", max_bytes=10_000))
    assert pending == ev.Mute(MuteReason.RESPONSE_PENDING)
    response = fetch_response(11, 1, records=30, session_id=7)
    x = (len(response) - 4) / 1000 - 10
    # Decided as the response comes (its bytes are the charge): the response goes first, then the mute.
    [send, mute, until, note, timer, unpending] = core.handle(ev.UpstreamData(NOW, response))
    # Fetch v11 throttles itself: the back-off probe is read halfway through the mute (backoff.py).
    assert (mute, until, note, timer) == (ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + x)),
                                          ev.NoteUnread(), ev.SetTimer(pytest.approx(NOW + x / 2)))
    assert core.throttling.muted_until == pytest.approx(NOW + x)
    assert unpending == ev.Unmute(MuteReason.RESPONSE_PENDING) and core.throttled
    delivered = b"".join(send.parts)
    assert throttle_of(delivered, ApiKey.Fetch, 11) == round(x * 1000)
    if mode == "deliver":
        assert len(delivered) == len(response), "deliver: the records the upstream sent, throttle patched"
        copied = sum(len(part) for part in send.parts if not isinstance(part, memoryview))
        assert copied <= 4, "views of the response around a fresh throttle field: no copy of the records"
    else:
        # empty: the broker's throttled answer, no partitions, the upstream's session id kept.
        from kafka.protocol.consumer import FetchResponse
        decoded = FetchResponse.decode(delivered[8:], version=11)
        assert decoded.responses == [] and decoded.session_id == 7
        [state] = [s for s in core.wiring.charging.quotas.snapshot(NOW) if s.quota_type == "consumer_byte_rate"]
        assert state.rate == 0, "an emptied fetch is not charged (Kafka's unrecordQuotaSensor)"


@pytest.mark.parametrize("version", [11, 12, 16])
@pytest.mark.parametrize("quota", ["consumer_record_rate", None])
def test_a_fetch_responses_records_are_counted_once_when_wanted(version: int, quota: str | None) -> None:
    """Records are counted for a record quota, or for the metrics (`wants_records`): by the core's
    address walk, which passes every batch anyway, from v16 (NodeEndpoints), else by the handler."""
    recorder = Recorder(wants_records=quota is None)
    quotas = {"entities": [{"client_id": "c", quota: 1e9}]} if quota else None
    core = connected_core(quotas, observer=recorder)
    core.handle(ev.ClientData(NOW, fetch_request(version, 1, "c")))
    core.handle(ev.UpstreamData(NOW, fetch_response(version, 1, records=7)))
    assert recorder.fetched_records == [7]
    if quota:
        [state] = core.wiring.charging.quotas.snapshot(NOW)
        assert state.rate > 0, "the record quota was charged"


MUTATIONS = {"window_size_seconds": 1, "window_count": 2,
             "entities": [{"client_id": "admin", "controller_mutation_rate": 5}]}
ADMIN = Principal("ANONYMOUS", "admin")


def grow(correlation_id: int, topic: str, count: int) -> bytes:
    entry = CreatePartitionsRequest.CreatePartitionsTopic(name=topic, count=count, assignments=None)
    return encode_request(ApiKey.CreatePartitions, 3, correlation_id, "admin", topics=[entry], timeout_ms=1000,
                          validate_only=False)


def metadata(correlation_id: int) -> bytes:
    return encode_request(ApiKey.Metadata, 9, correlation_id, "admin", topics=None, allow_auto_topic_creation=False)


def test_a_mutation_waits_for_its_topic_lookup_and_nothing_overtakes_it() -> None:
    """CreatePartitions costs the partitions it adds, which kqp must look up for an unknown topic.
    Bucket: rate 5/s, burst 5 x 2 x 1 = 10 tokens; growing g from 2 to 6 partitions costs 4."""
    core = connected_core(MUTATIONS)
    play(core, [
        (ev.ClientData(NOW, grow(1, "g", 6) + metadata(2)), [ev.Mute(MuteReason.LOOKUP), ev.LookUpTopics()]),
        (ev.ClientData(NOW, grow(3, "g", 8)), []),           # read (muted, but bytes in flight arrive), held
    ])
    assert not core.drained and core.muted(Side.CLIENT)
    topic_cache(core).learn("g", 2)                     # what the upstream's Metadata said
    play(core, [
        (ev.TopicsLookedUp(NOW), [to_upstream(grow(1, "g", 6)), ev.Unmute(MuteReason.LOOKUP),
                                  to_upstream(metadata(2)), to_upstream(grow(3, "g", 8))]),
    ])
    [state] = core.wiring.charging.quotas.snapshot(NOW)
    # The cache says g has 2 partitions until the first grow's answer arrives, so the second one
    # is charged 8 - 2 = 6: 10 - 4 - 6 = 0 tokens left.
    assert state.tokens == 0


def test_a_request_planned_again_after_its_lookup_is_counted_once() -> None:
    recorder = Recorder()
    core = make_core(MUTATIONS, observer=recorder)
    core.handle(ev.ClientConnected(NOW))
    core.handle(ev.UpstreamConnected(NOW))
    assert core.handle(ev.ClientData(NOW, grow(1, "g", 6)))[-1] == ev.LookUpTopics()
    core.handle(ev.TopicsLookedUp(NOW))
    assert recorder.requests == [ApiKey.CreatePartitions]


def create_topics(correlation_id: int, *names: str) -> bytes:
    entries = [CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[],
                                                  configs=[]) for n in names]
    return encode_request(ApiKey.CreateTopics, 7, correlation_id, "admin", topics=entries, timeout_ms=1000,
                          validate_only=False)


def test_create_if_not_exists_under_debt_gets_36_from_kqp_without_the_upstream() -> None:
    """Bucket: rate 5/s, burst 10, in debt by 20 (throttle 4 s). [orders, fresh]: fresh would get 89,
    so whether orders exists decides between 36 and 89: the core holds the request for a lookup,
    which finds it. kqp then answers alone (nothing is admitted): 36 for orders, 89 for fresh,
    throttled 4 s and muted."""
    core = connected_core(MUTATIONS)
    core.wiring.charging.quotas.record_mutations(ADMIN, 30, NOW)     # K = 10 - 30 = -20
    request = create_topics(1, "orders", "fresh")
    play(core, [(ev.ClientData(NOW, request), [ev.Mute(MuteReason.LOOKUP), ev.LookUpTopics()])])
    topic_cache(core).learn("orders", 3)                   # what the lookup found
    actions = core.handle(ev.TopicsLookedUp(NOW))
    assert not [a for a in actions if isinstance(a, ev.Send) and a.side is Side.UPSTREAM]
    [answer] = [a for a in actions if isinstance(a, ev.Send)]
    decoded = CreateTopicsResponse.decode(b"".join(answer.parts)[9:], version=7)   # flexible header
    assert [(t.name, t.error_code) for t in decoded.topics] == [("orders", 36), ("fresh", 89)]
    assert decoded.throttle_time_ms == 4000
    assert ev.Mute(MuteReason.THROTTLED) in actions and ev.SetTimer(pytest.approx(NOW + 4)) in actions
    assert actions[-1] == ev.Unmute(MuteReason.LOOKUP)
    assert core.wiring.charging.quotas.mutation_tokens(ADMIN, NOW) == -20, "neither topic spent anything"


def test_a_metadata_request_that_may_auto_create_waits_for_a_lookup_then_charges() -> None:
    """Metadata with allow_auto_topic_creation naming a topic kqp does not know: the lookup says it
    did not exist, so when the answer shows it with 4 partitions, this request created them:
    charged to admin permissively (10 - 4 = 6 tokens), the Metadata answer itself unthrottled."""
    core = connected_core(MUTATIONS)
    Topic = MetadataRequest.MetadataRequestTopic
    request = encode_request(ApiKey.Metadata, 9, 1, "admin", topics=[Topic(name="auto")],
                             allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
                             include_topic_authorized_operations=False)
    play(core, [
        (ev.ClientData(NOW, request), [ev.Mute(MuteReason.LOOKUP), ev.LookUpTopics()]),
        (ev.TopicsLookedUp(NOW), [to_upstream(request), ev.Unmute(MuteReason.LOOKUP)]),
    ])
    Partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
    body = MetadataResponse(version=9, throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=1,
                            topics=[MetadataResponse.MetadataResponseTopic(
                                error_code=0, name="auto", is_internal=False,
                                partitions=[Partition(error_code=0, partition_index=p, leader_id=1, leader_epoch=0,
                                                      replica_nodes=[1], isr_nodes=[1], offline_replicas=[])
                                            for p in range(4)])]).encode(version=9)
    head = struct.pack(">i", 1) + b"\x00"             # Metadata v9: flexible response header
    response = struct.pack(">i", len(head) + len(body)) + head + bytes(body)
    play(core, [(ev.UpstreamData(NOW, response), [to_client(response)])])
    assert core.wiring.charging.quotas.mutation_tokens(ADMIN, NOW) == 6
    assert topic_cache(core).partitions("auto") == 4


def test_closing_while_a_lookup_runs_ends_the_wait() -> None:
    core = connected_core(MUTATIONS)
    play(core, [
        (ev.ClientData(NOW, grow(1, "g", 6)), [ev.Mute(MuteReason.LOOKUP), ev.LookUpTopics()]),
        (ev.ClientLost(NOW), [ev.Close("client_closed")]),
        (ev.TopicsLookedUp(NOW), []),
    ])


def test_a_response_time_quota_forwards_one_request_at_a_time() -> None:
    """A broker reads one request per connection at a time, so a throttle known only from the
    response (here consumer_byte_rate) stops the next request. kqp, which could forward what the
    client pipelined, holds it until the response is back (a Fetch response's size is never known
    before it is back, however far below its quota the consumer is)."""
    core = connected_core(FETCH)
    first, second = fetch_request(11, 1, "c"), fetch_request(11, 2, "c")
    play(core, [
        (ev.ClientData(NOW, first + second),
         [to_upstream(fetch_request(11, 1, "c", max_bytes=10_000)), ev.Mute(MuteReason.RESPONSE_PENDING)]),
        # Small and under quota: delivered unthrottled, and the next request goes at once.
        (ev.UpstreamData(NOW, fetch_response(11, 1, records=0)),
         [to_client(fetch_response(11, 1, records=0)), ev.Unmute(MuteReason.RESPONSE_PENDING),
          to_upstream(fetch_request(11, 2, "c", max_bytes=10_000)), ev.Mute(MuteReason.RESPONSE_PENDING)]),
    ])


def test_a_request_quota_is_decided_as_the_request_is_read_and_stops_the_pipeline_there() -> None:
    """request_rate 0.5/s over 11 windows of 1 s: a fresh sensor measures over 10 s, so five requests
    read as 0.5/s, within; the sixth as 0.6/s, X = (0.6 - 0.5) / 0.5 x 10 = 2 s, capped at the window,
    1 s. Pipelined, the first six go as they are read (the sixth throttled) and the seventh waits in the
    muted connection: nothing waits for a response to learn its request quota."""
    core = connected_core({"window_size_seconds": 1, "window_count": 11,
                           "entities": [{"client_id": "c", "request_rate": 0.5}]})
    r = [produce_frame("t", 7, n, "c", records=1) for n in range(1, 8)]
    play(core, [
        (ev.ClientData(NOW, b"".join(r)),
         [*(to_upstream(f) for f in r[:6]), ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + 1.0))]),
        (ev.UpstreamData(NOW + 0.01, produce_response(7, 1)), [to_client(produce_response(7, 1))]),
    ])
    responses = b"".join(produce_response(7, n) for n in range(2, 6))
    actions = core.handle(ev.UpstreamData(NOW + 0.02, responses + produce_response(7, 6)))
    assert actions[:4] == [to_client(produce_response(7, n)) for n in range(2, 6)]
    assert actions[4] == to_client(produce_response(7, 6, throttle_ms=1000)), "told the whole throttle"
    play(core, [(ev.TimerFired(NOW + 1.0), [ev.Unmute(MuteReason.THROTTLED), to_upstream(r[6]),
                                            ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + 2.0))])])


def test_a_consumer_quota_does_not_serialise_other_requests() -> None:
    """Only Fetch responses are charged to consumer rates: a Produce of the same entity keeps pipelining."""
    core = connected_core(FETCH)
    first, second = produce_frame("t", 7, 1, "c", records=1), produce_frame("t", 7, 2, "c", records=1)
    play(core, [(ev.ClientData(NOW, first + second), [to_upstream(first), to_upstream(second)])])


def test_a_byte_rate_producer_is_not_serialised() -> None:
    """producer_byte_rate is known when the request arrives: pipelining is kept."""
    core = connected_core(BYTES)
    first, second = produce_frame("t", 7, 1, "c", records=1), produce_frame("t", 7, 2, "c", records=1)
    play(core, [(ev.ClientData(NOW, first + second), [to_upstream(first), to_upstream(second)])])


def test_the_sasl_exchange_is_exempt_from_request_quotas() -> None:
    """KIP-124: SaslHandshake and SaslAuthenticate are never charged to request quotas nor delayed.
    request_rate 1/s over 2 windows of 1 s would throttle the 2nd request of any other API by 1 s."""
    import struct

    from kafka.protocol.sasl import SaslHandshakeResponse
    core = connected_core({"window_size_seconds": 1, "window_count": 2,
                           "entities": [{"client_id": "c", "request_rate": 1}]})
    body = bytes(SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]).encode(version=1))
    for correlation_id in (1, 2, 3):
        request = encode_request(ApiKey.SaslHandshake, 1, correlation_id, "c", mechanism="PLAIN")
        response = struct.pack(">ii", 4 + len(body), correlation_id) + body
        play(core, [(ev.ClientData(NOW, request), [to_upstream(request)]),
                    (ev.UpstreamData(NOW, response), [to_client(response)])])
    assert not core.throttled


def test_an_upstream_throttle_longer_than_kqps_is_told_and_muted_for() -> None:
    """The response tells the larger of the upstream's throttle_time_ms and kqp's, and kqp mutes the
    connection as long as it tells: the broker throttled its own connection 25 s, kqp ~20 s."""
    core = connected_core(BYTES)
    frame = produce_frame("t", 5, 1, "c")
    x = x_of(frame)
    core.handle(ev.ClientData(NOW, frame))
    assert core.throttling.muted_until == pytest.approx(NOW + x, abs=0.0006)
    play(core, [(ev.UpstreamData(NOW + 0.01, produce_response(5, 1, throttle_ms=25_000)),
                 [ev.SetTimer(pytest.approx(NOW + 0.01 + 25.0)),
                  to_client(produce_response(5, 1, throttle_ms=25_000))])])
    assert core.throttling.muted_until == pytest.approx(NOW + 25.01)
