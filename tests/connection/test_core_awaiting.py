"""What a connection waits for from the runtime, and the order it keeps meanwhile (`awaiting.py`).

Playbooks as elsewhere (helpers.playbook). Listeners: a response naming a broker kqp has no listener
for is held, with the upstream muted, until `ListenersReady`; what came after it waits behind it;
a broker kqp cannot listen for closes the connection. Commits: an AlterClientQuotas that changes
something is answered in its FIFO turn once `Committed` says how the commit went, and no
request after it is read meanwhile. The listener lookup here is a dict the test fills as the edge's
binding would (`listening`).
"""

from __future__ import annotations

import struct

from helpers.playbook import (
    Recorder,
    connected_core,
    fetch_request,
    kqp_listener,
    metadata_response,
    play,
    produce_frame,
    produce_response,
    to_client,
    to_upstream,
)
from helpers.quota_frames import record_batch
from kafka.protocol.admin import AlterClientQuotasRequest as Alter
from kafka.protocol.consumer import FetchResponse

from kqp.protocol.addresses import BrokerAddress
from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import decode_response, encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import MuteReason
from kqp.proxy.policies.quota_admin import QuotaAdmin
from kqp.quotas.model import EntitySpec

NOW = 100.0
B1, B2 = BrokerAddress(1, "b1", 9092), BrokerAddress(2, "b2", 9092)


class Listening:
    """kqp's listeners as the core looks them up: broker -> the upstream address it was bound for."""

    def __init__(self, *known: BrokerAddress) -> None:
        self.known = {b.node_id: (b.host, b.port) for b in known}
        self.asked = 0

    def __call__(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        self.asked += 1
        return kqp_listener(node_id, host, port) if self.known.get(node_id) == (host, port) else None

    def bind(self, *brokers: BrokerAddress) -> None:
        self.known.update({b.node_id: (b.host, b.port) for b in brokers})


def metadata_request(correlation_id: int) -> bytes:
    return encode_request(ApiKey.Metadata, 9, correlation_id, "c", topics=None, allow_auto_topic_creation=False)


def as_kqp_says(*brokers: BrokerAddress) -> list[tuple[int, str, int]]:
    return [(b.node_id, *kqp_listener(b.node_id, b.host, b.port)) for b in brokers]


def brokers_of(send: ev.Send) -> list[tuple[int, str, int]]:
    response = decode_response(ApiKey.Metadata, 9, memoryview(b"".join(send.parts)))
    return [(b.node_id, b.host, b.port) for b in response.brokers]


def core_with(listening: Listening, observer: Recorder | None = None, **config: object) -> Connection:
    return connected_core(observer=observer, listener_for=listening, **config)


def test_brokers_kqp_listens_for_are_rewritten_at_once_and_nothing_is_asked() -> None:
    core = core_with(Listening(B1, B2))
    core.handle(ev.ClientData(NOW, metadata_request(1)))
    [send] = core.handle(ev.UpstreamData(NOW, metadata_response(1, B1, B2)))
    assert send.side is ev.Side.CLIENT and brokers_of(send) == as_kqp_says(B1, B2)


def test_a_new_broker_holds_its_response_and_what_follows_until_kqp_listens_for_it() -> None:
    listening = Listening(B1)
    core = core_with(listening)
    produce = produce_frame("t", 9, 2, "c")
    play(core, [(ev.ClientData(NOW, metadata_request(1) + produce), [to_upstream(metadata_request(1)),
                                                                      to_upstream(produce)])])
    play(core, [
        # Broker 2 is news: the response waits, unrewritten, and the upstream is read no more.
        (ev.UpstreamData(NOW, metadata_response(1, B1, B2)), [ev.Mute(MuteReason.LISTENERS),
                                                              ev.EnsureListeners((B2,))]),
        # The next response was already on its way: it waits behind the held one.
        (ev.UpstreamData(NOW, produce_response(9, 2)), []),
    ])
    listening.bind(B2)   # what the edge does for EnsureListeners
    actions = core.handle(ev.ListenersReady(NOW))
    assert actions[0] == ev.Unmute(MuteReason.LISTENERS)
    assert brokers_of(actions[1]) == as_kqp_says(B1, B2)
    assert actions[2:] == [to_client(produce_response(9, 2))]   # in order, after it
    assert not core.in_flight and not core.muted(ev.Side.UPSTREAM)


def test_a_broker_at_a_new_address_is_asked_for_too() -> None:
    moved = BrokerAddress(1, "b1-new", 9093)
    core = core_with(Listening(B1))
    core.handle(ev.ClientData(NOW, metadata_request(1)))
    assert core.handle(ev.UpstreamData(NOW, metadata_response(1, moved))) == [ev.Mute(MuteReason.LISTENERS),
                                                                            ev.EnsureListeners((moved,))]


def test_a_broker_kqp_cannot_listen_for_closes_the_connection_undelivered() -> None:
    # Never the upstream's own address (it would bypass kqp's quotas) nor a port kqp does not serve:
    # the client reconnects and asks again, which tries the listener again.
    core = core_with(Listening(B1), observer=(recorder := Recorder()))
    core.handle(ev.ClientData(NOW, metadata_request(1)))
    core.handle(ev.UpstreamData(NOW, metadata_response(1, B1, B2)))
    error = "broker 2 on 0.0.0.0:9194: Address already in use"
    play(core, [(ev.ListenersReady(NOW, error),
                 [ev.Close("listener_unavailable", f"a response names a broker kqp cannot listen for: {error}")])])
    assert recorder.closed == ["listener_unavailable"]


def test_a_listener_still_missing_once_answered_closes_rather_than_loops() -> None:
    core = core_with(Listening(B1))
    core.handle(ev.ClientData(NOW, metadata_request(1)))
    core.handle(ev.UpstreamData(NOW, metadata_response(1, B2)))
    play(core, [(ev.ListenersReady(NOW), [ev.Unmute(MuteReason.LISTENERS), ev.Close(
        "listener_unavailable", "kqp has no listener for broker 2 (b2:9092)")])])


def fetch_v16_response(correlation_id: int, records: int, *leaders: BrokerAddress) -> bytes:
    part = FetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=0, error_code=0, high_watermark=records, last_stable_offset=records, log_start_offset=0,
        aborted_transactions=[], preferred_read_replica=-1, records=record_batch("f", records))
    body = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        FetchResponse.FetchableTopicResponse(topic="t", partitions=[part])],
        node_endpoints=[FetchResponse.NodeEndpoint(node_id=b.node_id, host=b.host, port=b.port, rack=None)
                        for b in leaders]).encode(version=16)
    head = struct.pack(">i", correlation_id) + b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + bytes(body)


def test_a_held_fetch_response_s_records_are_counted_once() -> None:
    # Fetch v16+: the address walk counts the batches (the metrics want them); the walk after the
    # wait must not count them again.
    listening = Listening(B1)
    core = core_with(listening, observer=(recorder := Recorder(wants_records=True)))
    core.handle(ev.ClientData(NOW, fetch_request(16, 1, "c")))
    assert core.handle(ev.UpstreamData(NOW, fetch_v16_response(1, 7, B2)))[-1] == ev.EnsureListeners((B2,))
    listening.bind(B2)
    actions = core.handle(ev.ListenersReady(NOW))
    assert [a.side for a in actions if isinstance(a, ev.Send)] == [ev.Side.CLIENT]
    assert recorder.fetched_records == [7]


# -- commits ------------------------------------------------------------------------------------


def alter_request(correlation_id: int, rate: float) -> bytes:
    entity = [Alter.EntryData.EntityData(entity_type="user", entity_name="alice")]
    ops = [Alter.EntryData.OpData(key="request_rate", value=rate, remove=False)]
    return encode_request(ApiKey.AlterClientQuotas, 1, correlation_id, "c", validate_only=False,
                          entries=[Alter.EntryData(entity=entity, ops=ops)])


def alter_codes(send: ev.Send) -> list[tuple[int, str | None]]:
    response = decode_response(ApiKey.AlterClientQuotas, 1, memoryview(b"".join(send.parts)))
    return [(e.error_code, e.error_message) for e in response.entries]


def admin_core(**config: object) -> Connection:
    return connected_core(admin=lambda manager: QuotaAdmin(frozenset({"User:ANONYMOUS"}), lambda: manager.settings),
                          **config)


def test_a_commit_s_answer_keeps_its_turn_and_nothing_after_it_is_read_meanwhile() -> None:
    core = admin_core()
    before, after = produce_frame("t", 9, 1, "c"), produce_frame("t", 9, 3, "c")
    commit = ev.CommitQuotas(((EntitySpec("alice", None), {"request_rate": 5.0}),), "User:ANONYMOUS")
    play(core, [
        (ev.ClientData(NOW, before + alter_request(2, 5.0) + after),
         [to_upstream(before), ev.Mute(MuteReason.COMMIT), commit]),       # `after` is read, not forwarded
        (ev.UpstreamData(NOW, produce_response(9, 1)), [to_client(produce_response(9, 1))]),
    ])
    actions = core.handle(ev.Committed(NOW))
    assert alter_codes(actions[0]) == [(0, None)]                           # its answer, in its turn
    assert actions[1:] == [ev.Unmute(MuteReason.COMMIT), to_upstream(after)]


def test_a_failed_commit_answers_not_changed_for_the_entries_that_were_to_apply() -> None:
    core = admin_core()
    core.handle(ev.ClientData(NOW, alter_request(1, 5.0)))
    [answer, *_] = core.handle(ev.Committed(NOW, "cannot write the state file /s: No space left on device"))
    assert alter_codes(answer) == [(-1, "not changed: cannot write the state file /s: No space left on device")]


def test_a_commit_under_the_in_flight_cap_lifts_it_once_answered() -> None:
    core = admin_core(limits={"max_in_flight_per_connection": 1})
    after = produce_frame("t", 9, 2, "c")
    play(core, [(ev.ClientData(NOW, alter_request(1, 5.0) + after),
                 [ev.Mute(MuteReason.COMMIT), ev.CommitQuotas(((EntitySpec("alice", None), {"request_rate": 5.0}),),
                                                              "User:ANONYMOUS"), ev.Mute(MuteReason.IN_FLIGHT)])])
    actions = core.handle(ev.Committed(NOW))
    assert actions[1:] == [ev.Unmute(MuteReason.COMMIT), ev.Unmute(MuteReason.IN_FLIGHT), to_upstream(after),
                           ev.Mute(MuteReason.IN_FLIGHT)]


def test_the_runtime_s_answers_that_nobody_awaits_change_nothing() -> None:
    core = connected_core()
    play(core, [(ev.ListenersReady(NOW), []), (ev.Committed(NOW), []), (ev.TopicsLookedUp(NOW), [])])
