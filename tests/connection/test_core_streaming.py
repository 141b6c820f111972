"""A large Fetch response passes on to the client as it arrives (proxy/connection/streaming.py).

Playbooks of the core: the response's reads go out as they come, before its last byte is read; what
the client gets is byte for byte what a held response would have given (Fetch v16+: NodeEndpoints
made kqp's at the section's own size); what waits behind it (the next response, kqp's own answers)
goes after it; a throttle decided on its start is in its throttle field, and `fetch_throttle: empty`
answers empty and drops the rest; a response whose reply needs its records counted is held whole.
"""

from __future__ import annotations

import pytest
from helpers.playbook import Recorder, connected_core, fetch_request, fetch_response, kqp_listener
from kafka.protocol.consumer import FetchResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from kqp.protocol.addresses import BrokerAddress, rewrite_addresses
from kqp.protocol.apis import ApiKey
from kqp.protocol.headers import response_body_offset
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import Action, Side
from kqp.proxy.connection.streaming import STREAM_BYTES

NOW = 100.0
CHUNK = 64 * 1024
QUOTA = {"window_size_seconds": 1, "window_count": 11, "entities": [{"client_id": "c", "consumer_byte_rate": 100_000}]}


def big_fetch_response(version: int, correlation_id: int, endpoints: bool = True) -> bytes:
    """A Fetch response of about 1.5 MB: three partitions of record batches, and (v16+) NodeEndpoints."""
    def records(seed: int) -> bytes:
        builder = MemoryRecordsBuilder(2, 0, 1 << 30)
        for i in range(50):
            builder.append(1_700_000_000_000 + i, None, bytes([seed + i % 7]) * 10_000)
        builder.close()
        return bytes(builder.buffer())

    data = FetchResponse.FetchableTopicResponse.PartitionData
    parts = [data(partition_index=p, error_code=0, high_watermark=50, last_stable_offset=50, log_start_offset=0,
                  aborted_transactions=[], preferred_read_replica=-1, records=records(p)) for p in range(3)]
    extra = {}
    if endpoints and version >= 16:
        extra["node_endpoints"] = [FetchResponse.NodeEndpoint(node_id=3, host="upstream.example", port=9092)]
    body = bytes(FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        FetchResponse.FetchableTopicResponse(topic="t", topic_id=None, partitions=parts)], **extra
    ).encode(version=version))
    head = correlation_id.to_bytes(4, "big") + (b"\x00" if version >= 12 else b"")
    return (len(head) + len(body)).to_bytes(4, "big") + head + body


def client_bytes(actions: list[Action]) -> bytes:
    return b"".join(bytes(p) for a in actions if isinstance(a, ev.Send) and a.side is Side.CLIENT for p in a.parts)


def fetch(core: Connection, version: int, correlation_id: int, client_id: str = "c") -> None:
    out = core.handle(ev.ClientData(NOW, fetch_request(version, correlation_id, client_id)))
    assert any(isinstance(a, ev.Send) and a.side is Side.UPSTREAM for a in out)


def feed(core: Connection, data: bytes, chunk: int = CHUNK) -> list[list[Action]]:
    return [core.handle(ev.UpstreamData(NOW, data[i : i + chunk])) for i in range(0, len(data), chunk)]


def as_held(version: int, response: bytes) -> bytes:
    """What kqp gives for the response when held whole: its addresses made kqp's."""
    offset = response_body_offset(ApiKey.Fetch, version, memoryview(response))
    new, _ = rewrite_addresses(ApiKey.Fetch, version, memoryview(response), offset, kqp_listener)
    return response if new is None else new


def decoded(version: int, frame: bytes) -> FetchResponse:
    return FetchResponse.decode(frame[response_body_offset(ApiKey.Fetch, version, memoryview(frame)):],
                                version=version)


@pytest.mark.parametrize("version", [4, 11, 12, 15, 16, 17])
def test_a_large_response_goes_out_as_its_reads_arrive(version: int) -> None:
    core = connected_core()
    fetch(core, version, 1)
    response = big_fetch_response(version, 1)
    assert len(response) >= STREAM_BYTES
    outs = feed(core, response)
    sent = [client_bytes(out) for out in outs]
    assert all(sent[:-1]), "every read of it went on at once"
    got = b"".join(sent)
    assert len(got) == len(response)   # the length went out first: it holds
    if version < 16:
        assert got == response
    else:
        held = decoded(version, as_held(version, response))
        streamed = decoded(version, got)
        assert streamed.responses == held.responses == decoded(version, response).responses
        assert [(e.node_id, e.host, e.port) for e in streamed.node_endpoints] == [(3, "127.0.0.1", 19103)]
    assert core.drained and not core.closed


def test_what_waits_behind_it_goes_after_it() -> None:
    core = connected_core()
    fetch(core, 16, 1)
    fetch(core, 16, 2)
    large, small = big_fetch_response(16, 1), fetch_response(16, 2, records=3)
    outs = feed(core, large[:-10])
    assert b"".join(client_bytes(out) for out in outs)
    last = core.handle(ev.UpstreamData(NOW, large[-10:] + small))   # the tail and the next response, one read
    got = b"".join(client_bytes(out) for out in outs) + client_bytes(last)
    assert len(got) == len(large) + len(small) and got[len(large):] == small
    assert decoded(16, got[: len(large)]).node_endpoints[0].port == 19103


def test_a_throttled_response_withheld_empty_drops_the_rest() -> None:
    recorder = Recorder()
    core = connected_core(QUOTA, observer=recorder, fetch_throttle="empty")
    fetch(core, 12, 1)
    outs = feed(core, big_fetch_response(12, 1))
    got = b"".join(client_bytes(out) for out in outs)
    assert client_bytes(outs[0]) == got   # all it gets goes at once: the throttled answer, nothing after
    first = decoded(12, got)
    assert len(got) == 4 + int.from_bytes(got[:4], "big") < 200
    assert first.responses == [] and first.throttle_time_ms > 0   # KIP-219's throttled answer
    assert recorder.throttles[0][1] == "consumer_byte_rate"
    assert core.drained and not core.closed   # the rest was read and dropped: nothing is owed


def test_a_throttle_decided_on_its_start_is_in_its_field() -> None:
    core = connected_core(QUOTA)
    fetch(core, 16, 1)
    response = big_fetch_response(16, 1)
    outs = feed(core, response)
    got = b"".join(client_bytes(out) for out in outs)
    assert client_bytes(outs[0]), "it went on before its end"
    assert len(got) == len(response) and decoded(16, got).throttle_time_ms > 0


@pytest.mark.parametrize("version", [11, 16])
def test_the_metrics_count_its_records_as_it_passes(version: int) -> None:
    recorder = Recorder(wants_records=True)
    core = connected_core(observer=recorder)
    fetch(core, version, 1)
    response = big_fetch_response(version, 1)
    outs = feed(core, response)
    assert all(client_bytes(out) for out in outs[:-1])
    assert b"".join(client_bytes(out) for out in outs) == (response if version < 16 else
                                                            b"".join(client_bytes(out) for out in outs))
    assert sum(recorder.fetched_records) == 150 and recorder.fetched_records[-1] == 150


def test_a_response_whose_records_a_quota_charges_is_held_whole() -> None:
    recorder = Recorder(wants_records=True)
    core = connected_core({"entities": [{"client_id": "c", "consumer_record_rate": 1_000_000}]}, observer=recorder)
    fetch(core, 16, 1)
    response = big_fetch_response(16, 1)
    outs = feed(core, response)
    assert not any(client_bytes(out) for out in outs[:-1])
    assert client_bytes(outs[-1]) == as_held(16, response)
    assert recorder.fetched_records == [150]


def test_an_upstream_gone_mid_response_says_so() -> None:
    recorder = Recorder()
    core = connected_core(observer=recorder)
    fetch(core, 16, 1)
    feed(core, big_fetch_response(16, 1)[: 3 * CHUNK])
    out = core.handle(ev.UpstreamLost(NOW, None))
    closes = [a for a in out if isinstance(a, ev.Close)]
    assert recorder.closed == ["upstream_closed"] and "bytes short of the response" in (closes[0].message or "")


def test_a_broker_kqp_has_no_listener_for_is_left_out_and_asked_for() -> None:
    core = connected_core(listener_for=lambda node, host, port: None)
    fetch(core, 16, 1)
    response = big_fetch_response(16, 1)
    outs = feed(core, response)
    got = b"".join(client_bytes(out) for out in outs)
    assert len(got) == len(response) and b"upstream.example" not in got   # never the upstream's own address
    assert decoded(16, got).node_endpoints == [] and decoded(16, got).responses == decoded(16, response).responses
    assert ev.EnsureListeners((BrokerAddress(3, "upstream.example", 9092),)) in outs[-1]
    assert not core.closed
