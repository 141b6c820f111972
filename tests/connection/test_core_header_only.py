"""Playbooks of requests kqp forwards on their header alone (`kqp.protocol.advertised`).

ListOffsets v0 (Kafka 4 dropped it from the schemas kafka-python ships) and
GetTelemetrySubscriptions v0 (KIP-714: no schema in kafka-python; its header versions come from
Kafka's facts, flexible from v0) go upstream as the bytes the client sent, and their
responses come back untouched: no anomaly counted, request quotas charged, byte quotas not. Only a
throttle is written into a response, where Kafka's facts say where it sits (the telemetry
response starts with throttle_time_ms; ListOffsets v0 has none).
An API whose body kqp must read (CreateTopics v0: KIP-599) or whose response may name a broker
(ShareFetch: NodeEndpoints) is never passed on blindly: such a request closes the connection, as
any version kqp does not serve.

request_rate 1/s over 2 windows of 1 s: Kafka's Rate measures a fresh sensor over one full
window, so the 2nd request reads as 2 req/s: throttle (2 - 1) / 1 x 1 s = 1 s (capped at a window).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

import pytest
from helpers.playbook import Recorder, connected_core, play, to_client, to_upstream
from kafka.protocol.old.list_offsets import ListOffsetsRequest_v0, ListOffsetsResponse_v0

from kqp.protocol.advertised import BODY_APIS
from kqp.protocol.apis import ApiKey
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.events import MuteReason
from kqp.proxy.connection.handlers.registry import SASL_APIS
from kqp.proxy.policies.mutation_gate import GATED_APIS
from kqp.proxy.policies.quota_admin import ADMIN_APIS, QuotaAdmin

NOW = 100.0
_I32 = struct.Struct(">i")


def request(api_key: int, version: int, correlation_id: int, body: bytes, flexible: bool = False) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"c" + (b"\x00" if flexible else b"")
    return _I32.pack(len(head) + len(body)) + head + body


def response(correlation_id: int, body: bytes, flexible: bool = False) -> bytes:
    head = _I32.pack(correlation_id) + (b"\x00" if flexible else b"")
    return _I32.pack(len(head) + len(body)) + head + body


def list_offsets(correlation_id: int) -> tuple[bytes, bytes]:
    """A ListOffsets v0 exchange, bodies from kafka-python's classes of Kafka 0.10's version."""
    req = ListOffsetsRequest_v0(-1, [("t", [(0, -2, 1)])]).encode()
    resp = ListOffsetsResponse_v0([("t", [(0, 0, [0])])]).encode()
    return request(ApiKey.ListOffsets, 0, correlation_id, req), response(correlation_id, resp)


def telemetry(correlation_id: int) -> tuple[bytes, bytes]:
    """GetTelemetrySubscriptions v0: opaque bodies to kqp (a client instance id, then a tag section)."""
    body = uuid.UUID(int=correlation_id).bytes + b"\x00"
    return (request(ApiKey.GetTelemetrySubscriptions, 0, correlation_id, body, flexible=True),
            response(correlation_id, b"\x00\x00\x00\x00" + body * 3, flexible=True))


@pytest.mark.parametrize("exchange", [list_offsets, telemetry])
def test_a_header_only_exchange_goes_through_untouched(exchange: Callable[[int], tuple[bytes, bytes]]) -> None:
    """Byte quotas at 1 B/s do not apply: only Produce and Fetch carry bytes kqp charges (and, since
    only a Fetch response is charged to consumer rates, nothing holds the next request either)."""
    recorder = Recorder()
    core = connected_core({"entities": [{"client_id": "c", "producer_byte_rate": 1, "consumer_byte_rate": 1}]},
                          observer=recorder)
    req, resp = exchange(1)
    play(core, [
        (ev.ClientData(NOW, req), [to_upstream(req)]),
        (ev.UpstreamData(NOW, resp), [to_client(resp)]),
    ])
    assert recorder.anomalies == [] and recorder.closed == []
    assert len(recorder.requests) == 1


def as_sent(resp: bytes) -> bytes:
    return resp


def throttle_told(resp: bytes) -> bytes:
    """The telemetry response with its leading throttle_time_ms (after the size, correlation id and
    empty header tags) set to the 1 s throttle."""
    return resp[:9] + _I32.pack(1000) + resp[13:]


@pytest.mark.parametrize(("exchange", "told"), [(list_offsets, as_sent), (telemetry, throttle_told)])
def test_request_rate_throttles_a_header_only_request_by_the_mute(
        exchange: Callable[[int], tuple[bytes, bytes]], told: Callable[[bytes], bytes]) -> None:
    """The connection is muted for the 1 s throttle (docstring) from the read of the request that
    crossed the quota; the response tells it where kqp knows the field's place (telemetry), else it
    goes out as the upstream sent it (ListOffsets v0)."""
    recorder = Recorder()
    core = connected_core({"window_size_seconds": 1, "window_count": 2,
                           "entities": [{"client_id": "c", "request_rate": 1}]}, observer=recorder)
    (req1, resp1), (req2, resp2) = exchange(1), exchange(2)
    play(core, [
        (ev.ClientData(NOW, req1 + req2), [to_upstream(req1), to_upstream(req2), ev.Mute(MuteReason.THROTTLED),
                                           ev.SetTimer(pytest.approx(NOW + 1.0))]),
        (ev.UpstreamData(NOW, resp1), [to_client(resp1)]),
        (ev.UpstreamData(NOW, resp2), [to_client(told(resp2))]),
    ])
    assert recorder.anomalies == [] and recorder.mutes == [("start", "c", "request_rate")]


@pytest.mark.parametrize(("api_key", "version"), [(ApiKey.CreateTopics, 0), (ApiKey.ShareFetch, 0)])
def test_an_api_kqp_must_read_is_never_passed_blindly(api_key: int, version: int) -> None:
    recorder = Recorder()
    core = connected_core(observer=recorder)
    actions = core.handle(ev.ClientData(NOW, request(api_key, version, 1, b"\x00" * 16, flexible=api_key > 60)))
    assert [type(a) for a in actions] == [ev.Close] and actions[0].reason == "protocol_error"
    assert "outside kqp's range" in (actions[0].message or "") or "unknown api key" in (actions[0].message or "")


def test_every_api_the_core_reads_is_one_kqp_never_passes_blindly() -> None:
    """The core reads the bodies of the mutation gate's and SASL's APIs (and Produce and Fetch):
    the protocol's list of APIs kept to decodable versions must name them all. Every API with a
    handler of its own reads bodies, so the registry says the same; only the quota admin APIs,
    which kqp answers at its own versions whatever the upstream speaks, need not be listed."""
    assert GATED_APIS | SASL_APIS | {ApiKey.Produce, ApiKey.Fetch, ApiKey.ApiVersions} <= BODY_APIS
    handlers = connected_core(admin=lambda manager: QuotaAdmin(frozenset(), lambda: manager.settings)).wiring.handlers
    assert ADMIN_APIS <= handlers.apis
    assert handlers.apis - ADMIN_APIS <= BODY_APIS
