"""Playbooks of `mode: observe`: measured and charged as if enforced, the throttle counted, nothing acted on.

The arithmetic is test_core_throttling.py's (producer_byte_rate 1000 B/s over 11 windows of 1 s: a
fresh sensor reads one S-byte Produce as S / 10 B/s and throttles for X = S / 1000 - 10 s, about 20 s
for these frames). Observed, the same X is counted (`observed_throttled`), the response goes back as
the upstream sent it, and the next request is forwarded at once: no throttle_time_ms, no mute, no
pace, no fetch cap, no one-at-a-time forwarding, no THROTTLING_QUOTA_EXCEEDED.
"""

from __future__ import annotations

import pytest
from helpers.playbook import (
    Recorder,
    connected_core,
    fetch_request,
    fetch_response,
    play,
    produce_frame,
    produce_response,
    to_client,
    to_upstream,
    topic_cache,
)
from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.events import MuteReason
from kqp.quotas.model import Principal

NOW = 100.0
BYTES = "producer_byte_rate"


def quotas(*entries: dict, **section: object) -> dict:
    return {"window_size_seconds": 1, "window_count": 11, "entities": list(entries), **section}


def x_of(frame: bytes) -> float:
    return (len(frame) - 4) / 1000 - 10


@pytest.mark.parametrize("version", [3, 9])
def test_an_observed_produce_over_quota_is_counted_and_neither_told_nor_muted(version: int) -> None:
    recorder = Recorder()
    core = connected_core(quotas({"client_id": "c", BYTES: 1000, "mode": "observe"}), observer=recorder)
    first, second = produce_frame("t", version, 1, "c"), produce_frame("t", version, 2, "c")
    play(core, [
        # Both go at once: the first is over quota, but observed it holds nothing back (v3 is not paced either).
        (ev.ClientData(NOW, first + second), [to_upstream(first), to_upstream(second)]),
        (ev.UpstreamData(NOW + 0.01, produce_response(version, 1)), [to_client(produce_response(version, 1))]),
        (ev.UpstreamData(NOW + 0.02, produce_response(version, 2)), [to_client(produce_response(version, 2))]),
    ])
    # Counted once per request, as enforcing would have told it: the first's X, the second's larger.
    assert [(c, q) for c, q, _ in recorder.observed] == [("c", BYTES), ("c", BYTES)]
    assert recorder.observed[0][2] == pytest.approx(round(x_of(first) * 1000) / 1000)
    assert recorder.observed[1][2] > recorder.observed[0][2]
    assert recorder.throttles == [] and recorder.mutes == [] and not core.throttled
    # Charged exactly as if enforced: the sensor holds both requests.
    sensor = core.wiring.charging.quotas.sensor(BYTES, core.wiring.charging.quotas.limits(Principal("ANONYMOUS", "c"))[
        BYTES][0])
    assert sensor is not None and sensor.last_throttle > 0


def test_an_observed_acks_zero_produce_is_counted_without_a_mute() -> None:
    recorder = Recorder()
    core = connected_core(quotas({"client_id": "c", BYTES: 1000}, mode="observe"), observer=recorder)
    first, second = produce_frame("t", 7, 1, "c", acks=0), produce_frame("t", 7, 2, "c", acks=0)
    play(core, [(ev.ClientData(NOW, first + second), [to_upstream(first), to_upstream(second)])])
    assert [(c, q) for c, q, _ in recorder.observed] == [("c", BYTES)] * 2 and recorder.mutes == []


def test_an_entrys_own_mode_wins_over_the_sections() -> None:
    """quotas.mode observe, /clients/c enforce: c is throttled as ever, d (under <default>) only counted."""
    recorder = Recorder()
    core = connected_core(quotas({"client_id": "c", BYTES: 1000, "mode": "enforce"},
                                 {"client_id": "<default>", BYTES: 1000}, mode="observe"), observer=recorder)
    mine, other = produce_frame("t", 9, 1, "d"), produce_frame("t", 9, 2, "c")
    play(core, [(ev.ClientData(NOW, mine), [to_upstream(mine)])])
    assert core.handle(ev.ClientData(NOW, other))[:2] == [to_upstream(other), ev.Mute(MuteReason.THROTTLED)]
    assert recorder.mutes == [("start", "c", BYTES)] and not [o for o in recorder.observed if o[0] == "c"]


def test_an_observed_consumer_quota_caps_no_fetch_and_keeps_pipelining() -> None:
    """Enforced, consumer_byte_rate 1000 B/s caps max_bytes at 10000 and forwards one Fetch at a time
    (test_core_throttling.py); observed, both requests go as sent, and the response's throttle is counted."""
    recorder = Recorder()
    core = connected_core(quotas({"client_id": "c", "consumer_byte_rate": 1000, "mode": "observe"}),
                          observer=recorder)
    first, second = fetch_request(11, 1, "c"), fetch_request(11, 2, "c")
    big = fetch_response(11, 1, 300)
    play(core, [
        (ev.ClientData(NOW, first + second), [to_upstream(first), to_upstream(second)]),
        (ev.UpstreamData(NOW, big), [to_client(big)]),
    ])
    assert [(c, q) for c, q, _ in recorder.observed] == [("c", "consumer_byte_rate")] and recorder.mutes == []


def create_topics(correlation_id: int, *names: str) -> bytes:
    entries = [CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[],
                                                  configs=[]) for n in names]
    return encode_request(ApiKey.CreateTopics, 7, correlation_id, "admin", topics=entries, timeout_ms=1000,
                          validate_only=False)


def created(correlation_id: int, *names: str) -> bytes:
    import struct

    topic = CreateTopicsResponse.CreatableTopicResult
    body = bytes(CreateTopicsResponse(throttle_time_ms=0, topics=[
        topic(name=n, topic_id=None, error_code=0, error_message=None, topic_config_error_code=0,
              num_partitions=1, replication_factor=1, configs=[]) for n in names]).encode(version=7))
    head = struct.pack(">i", correlation_id) + b"\x00"   # flexible response header
    return struct.pack(">i", len(head) + len(body)) + head + body


def test_an_observed_mutation_quota_refuses_no_topic() -> None:
    """Bucket: rate 5/s, burst 10, in debt by 20. Enforced, CreateTopics v7 would get 89 for `fresh`
    (test_core_throttling.py); observed, the request goes whole (after the lookup that tells whether
    `fresh` exists), the topic is charged permissively (-21 tokens), and -K/R = 21 / 5 = 4.2 s is counted."""
    recorder = Recorder()
    core = connected_core({"window_size_seconds": 1, "window_count": 2, "entities": [
        {"client_id": "admin", "controller_mutation_rate": 5, "mode": "observe"}]}, observer=recorder)
    admin = Principal("ANONYMOUS", "admin")
    core.wiring.charging.quotas.record_mutations(admin, 30, NOW)     # K = 10 - 30 = -20
    request = create_topics(1, "fresh")
    play(core, [(ev.ClientData(NOW, request), [ev.Mute(MuteReason.LOOKUP), ev.LookUpTopics()])])
    assert topic_cache(core).partitions("fresh") is None
    play(core, [
        (ev.TopicsLookedUp(NOW), [to_upstream(request), ev.Unmute(MuteReason.LOOKUP)]),
        (ev.UpstreamData(NOW, created(1, "fresh")), [to_client(created(1, "fresh"))]),
    ])
    assert core.wiring.charging.quotas.mutation_tokens(admin, NOW) == -21
    assert recorder.observed == [("admin", "controller_mutation_rate", 4.2)] and recorder.mutes == []
