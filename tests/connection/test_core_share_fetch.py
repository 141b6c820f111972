"""Playbooks of a share group's fetches (KIP-932) through the core, and kqp's ApiVersions v5 answer.

A ShareFetch is a consumer's fetch to Kafka's quotas (KafkaApis charges its response to the fetch
quota and caps its max_bytes as a Fetch's): consumer_byte_rate 1000 B/s over 11 windows of 1 s caps
max_bytes at 1000 x 10 x 1 = 10000, and a response of R bytes as Kafka counts them (its body and a
4-byte size prefix: the frame less its header) throttles for R / 1000 - 10 s. A share fetch's client
does not throttle itself (ShareFetchResponse keeps AbstractResponse.shouldClientThrottle's false),
so the mute does it. The broker endpoints of ShareFetch and ShareAcknowledge answers become kqp's
listeners.

ApiVersions v5 (KIP-1242) names the cluster and node a client means to reach; kqp answers it as a
broker does: REBOOTSTRAP_REQUIRED when that is not the upstream's cluster or this listener's broker,
INVALID_REQUEST for a cluster without a node or a node without a cluster.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from helpers.playbook import Recorder, connected_core, to_upstream
from helpers.quota_frames import record_batch

from kqp.protocol.api_versions import INVALID_REQUEST, REBOOTSTRAP_REQUIRED
from kqp.protocol.apis import ApiKey, message_classes
from kqp.protocol.headers import encode_response_header, parse_request_header
from kqp.protocol.messages import encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.events import MuteReason
from kqp.proxy.connection.handlers.api_versions import ApiVersionsHandler
from kqp.proxy.connection.plans import Request
from kqp.quotas.model import Principal, QuotaType

NOW = 100.0
VERSION = 2
ShareFetchRequest, ShareFetchResponse = message_classes(ApiKey.ShareFetch)
ShareAcknowledgeResponse = message_classes(ApiKey.ShareAcknowledge)[1]
QUOTA = {"window_size_seconds": 1, "window_count": 11, "entities": [{"client_id": "c", "consumer_byte_rate": 1000}]}
_I32 = struct.Struct(">i")


def share_fetch(correlation_id: int, max_bytes: int = 50 << 20) -> bytes:
    return encode_request(ApiKey.ShareFetch, VERSION, correlation_id, "c", group_id="g", member_id="m",
                          share_session_epoch=0, max_wait_ms=500, min_bytes=1, max_bytes=max_bytes, max_records=500,
                          batch_size=500, topics=[], forgotten_topics_data=[])


def framed(api_key: int, correlation_id: int, body: bytes) -> bytes:
    head = encode_response_header(api_key, VERSION, correlation_id)
    return _I32.pack(len(head) + len(body)) + head + body


def share_fetch_answer(correlation_id: int, records: int, endpoints: tuple[tuple[int, str, int], ...] = (),
                       error_code: int = 0) -> bytes:
    topic = ShareFetchResponse.ShareFetchableTopicResponse
    part = topic.PartitionData(partition_index=0, error_code=0, error_message=None, acknowledge_error_code=0,
                               acknowledge_error_message=None,
                               current_leader=topic.PartitionData.LeaderIdAndEpoch(leader_id=1, leader_epoch=0),
                               records=record_batch("s", records) if records else b"",
                               acquired_records=[topic.PartitionData.AcquiredRecords(
                                   first_offset=0, last_offset=max(records - 1, 0), delivery_count=1)])
    body = ShareFetchResponse(
        version=VERSION, throttle_time_ms=0, error_code=error_code, error_message=None,
        acquisition_lock_timeout_ms=30_000, responses=[topic(topic_id=uuid.uuid4(), partitions=[part])],
        node_endpoints=[ShareFetchResponse.NodeEndpoint(node_id=n, host=h, port=p, rack=None)
                        for n, h, p in endpoints]).encode(version=VERSION)
    return framed(ApiKey.ShareFetch, correlation_id, bytes(body))


def delivered(actions: list[ev.Action]) -> bytes:
    [send] = [a for a in actions if isinstance(a, ev.Send) and a.side is ev.Side.CLIENT]
    return b"".join(send.parts)


@pytest.mark.parametrize("mode", ["deliver", "empty"])
def test_a_share_fetch_is_capped_charged_and_throttled_as_a_fetch(mode: str) -> None:
    core = connected_core(QUOTA, fetch_throttle=mode)
    actions = core.handle(ev.ClientData(NOW, share_fetch(1)))
    assert actions[0] == to_upstream(share_fetch(1, max_bytes=10_000)), "max_bytes capped at the quota's span"
    answer = share_fetch_answer(1, records=30)
    x = (len(answer) - 9 + 4) / 1000 - 10   # header v1: size prefix, correlation id, empty tags
    actions = core.handle(ev.UpstreamData(NOW, answer))
    assert ev.Mute(MuteReason.THROTTLED) in actions and core.throttled
    assert core.throttling.muted_until == pytest.approx(NOW + x)
    sent = delivered(actions)
    body = sent[9:]   # size, correlation id, empty header tags
    assert _I32.unpack_from(body)[0] == round(x * 1000), "throttle_time_ms told"
    [state] = [s for s in core.wiring.charging.quotas.snapshot(NOW) if s.quota_type == "consumer_byte_rate"]
    if mode == "deliver":
        assert len(sent) == len(answer) and state.rate > 0
    else:   # the broker's throttled answer: nothing acquired delivered, nothing charged
        decoded = ShareFetchResponse.decode(body, version=VERSION)
        assert decoded.responses == [] and decoded.node_endpoints == [] and decoded.acquisition_lock_timeout_ms == 0
        assert state.rate == 0, "an emptied share fetch is not charged (Kafka's unrecordQuotaSensor)"


@pytest.mark.parametrize("quota", ["consumer_record_rate", "consumer_batch_rate"])
def test_a_share_fetchs_records_and_batches_are_charged(quota: str) -> None:
    recorder = Recorder(wants_records=True)
    core = connected_core({"entities": [{"client_id": "c", quota: 1e9}]}, observer=recorder)
    core.handle(ev.ClientData(NOW, share_fetch(1)))
    core.handle(ev.UpstreamData(NOW, share_fetch_answer(1, records=7)))
    assert recorder.fetched_records == [7]
    [state] = core.wiring.charging.quotas.snapshot(NOW)
    assert state.rate > 0, f"{quota} was charged"


def test_share_answers_name_kqps_listeners_for_brokers() -> None:
    core = connected_core()
    core.handle(ev.ClientData(NOW, share_fetch(1)))
    sent = delivered(core.handle(ev.UpstreamData(NOW, share_fetch_answer(1, 3, endpoints=((2, "up", 9092),)))))
    decoded = ShareFetchResponse.decode(sent[9:], version=VERSION)
    assert [(e.node_id, e.host, e.port) for e in decoded.node_endpoints] == [(2, "127.0.0.1", 19102)]

    request = encode_request(ApiKey.ShareAcknowledge, VERSION, 2, "c", group_id="g", member_id="m",
                             share_session_epoch=1, topics=[])
    core.handle(ev.ClientData(NOW, request))
    body = ShareAcknowledgeResponse(version=VERSION, throttle_time_ms=0, error_code=0, error_message=None,
                                    acquisition_lock_timeout_ms=30_000, responses=[], node_endpoints=[
                                        ShareAcknowledgeResponse.NodeEndpoint(node_id=3, host="up", port=9093,
                                                                              rack="r")]).encode(version=VERSION)
    sent = delivered(core.handle(ev.UpstreamData(NOW, framed(ApiKey.ShareAcknowledge, 2, bytes(body)))))
    decoded = ShareAcknowledgeResponse.decode(sent[9:], version=VERSION)
    assert [(e.node_id, e.host, e.port, e.rack) for e in decoded.node_endpoints] == [(3, "127.0.0.1", 19103, "r")]


def api_versions_error(node: int | None, cluster: str | None, node_id: int, ours: str | None = "kafka-1") -> int:
    """The error kqp's ApiVersions v5 answer carries, asked on `node`'s listener (None: bootstrap)."""
    frame = memoryview(encode_request(ApiKey.ApiVersions, 5, 1, "c", client_software_name="test",
                                      client_software_version="1", cluster_id=cluster, node_id=node_id))
    hdr = parse_request_header(frame)
    handler = ApiVersionsHandler(lambda: {ApiKey.ApiVersions: (0, 5)}, [], lambda: ours)
    plan = handler.plan(Request(hdr, frame, (frame,), len(frame), Principal("ANONYMOUS", "c"), NOW, True, node=node))
    assert isinstance(plan.answer, bytes)
    return int.from_bytes(plan.answer[8:10], "big")   # header v0: size, correlation id; then error_code


def test_api_versions_v5_checks_the_cluster_and_node_the_client_means() -> None:
    assert api_versions_error(1, "kafka-1", 1) == 0
    assert api_versions_error(1, None, -1) == 0, "a client that names nothing is answered"
    assert api_versions_error(None, "kafka-1", 2) == 0, "the bootstrap listener stands for no one broker"
    assert api_versions_error(1, "kafka-1", 1, ours=None) == 0, "a cluster id kqp has not learnt yet checks nothing"
    assert api_versions_error(1, "kafka-1", 2) == REBOOTSTRAP_REQUIRED, "another broker's listener"
    assert api_versions_error(1, "other", 1) == REBOOTSTRAP_REQUIRED, "another cluster"
    assert api_versions_error(1, "kafka-1", -1) == INVALID_REQUEST
    assert api_versions_error(1, None, 1) == INVALID_REQUEST


def test_an_observed_consumer_quota_caps_no_share_fetch_and_counts_what_it_would_have_done() -> None:
    recorder = Recorder()
    core = connected_core({**QUOTA, "entities": [{"client_id": "c", "consumer_byte_rate": 1000, "mode": "observe"}]},
                          observer=recorder)
    assert core.handle(ev.ClientData(NOW, share_fetch(1)))[0] == to_upstream(share_fetch(1)), "not capped"
    answer = share_fetch_answer(1, records=30)
    assert delivered(core.handle(ev.UpstreamData(NOW, answer))) == answer and not core.throttled
    assert [(c, q) for c, q, _ in recorder.observed] == [("c", "consumer_byte_rate")] and recorder.mutes == []


def test_a_pool_divides_its_budget_among_share_consumers_as_among_any() -> None:
    """A pool of consumer_byte_rate 1000 over members `c`-anything: the share fetch is capped at the
    member's allocation's span and its response charged to the member."""
    core = connected_core({"window_size_seconds": 1, "window_count": 11, "entities": [{"client_id_prefix": "c"}],
                           "pools": [{"name": "queues", "consumer_byte_rate": 1000,
                                      "members": [{"client_id_prefix": "c"}]}]})
    assert core.handle(ev.ClientData(NOW, share_fetch(1)))[0] == to_upstream(share_fetch(1, max_bytes=10_000))
    core.handle(ev.UpstreamData(NOW, share_fetch_answer(1, records=5)))
    [member] = core.wiring.charging.quotas.pools.ledgers[("queues", QuotaType.CONSUMER_BYTE_RATE)].members.values()
    assert sum(member.used) > 0, "the share consumer's bytes are its pool member's"
