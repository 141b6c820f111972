"""ClientSession driven by hand: the in-flight FIFO and KIP-219 muting, with no socket and no sleep.

A real session on a real context (config, quota manager, delay driver) with fake transports at
both edges and a fake loop whose clock moves only when the test says (helpers.quota_fakes). Each
test feeds request frames as the client would (pipelined, in one read), plays the upstream's
responses, and checks what each side received, and when.

Quota arithmetic (Kafka's, quota windows 1 s x 11, producer_byte_rate 1000 B/s): a fresh sensor
measures over (11 - 1) x 1 s = 10 s, so one Produce frame of S bytes reads as S / 10 B/s and
throttles for X = (S / 10 - 1000) / 1000 x 10 = S / 1000 - 10 seconds; ~30 KB gives ~20 s.
"""

from __future__ import annotations

import struct

import pytest
from helpers.quota_fakes import SessionHarness, session_harness
from helpers.quota_frames import produce_frame
from kafka.protocol.producer import ProduceResponse

QUOTA = {"window_size_seconds": 1, "window_count": 11,
         "entities": [{"client_id": "c", "producer_byte_rate": 1000}]}


def produce_response(version: int, correlation_id: int) -> bytes:
    part = ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
        index=0, error_code=0, base_offset=0, log_append_time_ms=-1, log_start_offset=0)
    body = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=[part])],
                           throttle_time_ms=0).encode(version=version)
    return struct.pack(">ii", 4 + len(body), correlation_id) + bytes(body)


def api_versions_request(correlation_id: int) -> bytes:
    head = struct.pack(">hhih", 18, 2, correlation_id, 1) + b"c"   # header v1, empty v2 body
    return struct.pack(">i", len(head)) + head


def throttle_ms_of(frame: bytes, version: int) -> int:
    return ProduceResponse.decode(frame, version=version, header=True).throttle_time_ms


def expected_throttle_s(request: bytes) -> float:
    return len(request) / 1000 - 10


def test_local_answer_waits_for_the_responses_before_it() -> None:
    h = session_harness()
    h.session.data_received(produce_frame("t", 7, 1, "c") + api_versions_request(2) + produce_frame("t", 7, 3, "c"))
    assert h.upstream.correlation_ids(request=True) == [1, 3], "ApiVersions is answered by kqp, not forwarded"
    assert h.client.frames() == [], "kqp's own answer must not overtake the response to request 1"
    h.session.on_upstream_data(produce_response(7, 1))
    assert h.client.correlation_ids() == [1, 2]
    h.session.on_upstream_data(produce_response(7, 3))
    assert h.client.correlation_ids() == [1, 2, 3]
    assert not h.session.closed and h.session.drained


def test_over_quota_produce_mutes_before_the_next_request_is_forwarded() -> None:
    h = session_harness(QUOTA)
    first, second = produce_frame("t", 7, 1, "c"), produce_frame("t", 7, 2, "c")
    h.session.data_received(first + second)        # pipelined: both read at once
    assert h.upstream.correlation_ids(request=True) == [1], "the second request passed a mute"
    assert h.client.paused, "kqp kept reading an over-quota client"
    start = h.loop.time()
    h.session.on_upstream_data(produce_response(7, 1))
    # v7 honours client throttling: the response goes out at once, carrying the throttle.
    (response,) = h.client.frames()
    x = expected_throttle_s(first)
    assert throttle_ms_of(response, 7) == pytest.approx(x * 1000, abs=1)
    h.loop.advance(start + x - 0.01)
    assert h.upstream.correlation_ids(request=True) == [1], "unmuted before the throttle passed"
    h.loop.advance(start + x + 0.01)
    assert h.upstream.correlation_ids(request=True) == [1, 2]
    # Reading resumed at the unmute, and stopped again for the second request's own throttle.
    assert (h.client.pauses, h.client.resumes, h.client.paused) == (2, 1, True)


def test_old_version_response_is_held_for_the_throttle() -> None:
    h = session_harness(QUOTA)
    first, second = produce_frame("t", 4, 1, "c"), produce_frame("t", 4, 2, "c")
    h.session.data_received(first + second)
    start = h.loop.time()
    h.session.on_upstream_data(produce_response(4, 1))
    assert h.client.frames() == [], "a v4 response does not honour client throttling: it must be held"
    x = expected_throttle_s(first)
    h.loop.advance(start + x - 0.01)
    assert h.client.frames() == [] and h.upstream.correlation_ids(request=True) == [1]
    h.loop.advance(start + x + 0.01)
    (response,) = h.client.frames()
    # As the broker does for old versions, the held response reports the delay it served.
    assert throttle_ms_of(response, 4) == pytest.approx(x * 1000, abs=1)
    assert h.upstream.correlation_ids(request=True) == [1, 2], "the connection stays muted until then"


def test_acks_zero_over_quota_is_muted_without_a_response() -> None:
    h = session_harness(QUOTA)
    first = produce_frame("t", 7, 1, "c", acks=0)
    h.session.data_received(first + produce_frame("t", 7, 2, "c", acks=0))
    assert h.upstream.correlation_ids(request=True) == [1]
    assert h.client.paused and h.session.in_flight == type(h.session.in_flight)(), "acks=0 owes no response"
    # Some upstreams answer acks=0 anyway (librdkafka's mock for Produce v9): kqp drops the answer.
    h.session.on_upstream_data(produce_response(7, 1))
    assert h.client.frames() == [] and not h.session.closed
    h.loop.advance(h.loop.time() + expected_throttle_s(first) + 0.01)
    assert h.upstream.correlation_ids(request=True) == [1, 2]


def test_response_to_no_request_closes_the_connection() -> None:
    h: SessionHarness = session_harness()
    h.session.data_received(produce_frame("t", 7, 1, "c"))
    h.session.on_upstream_data(produce_response(7, 99))
    assert h.session.closed and h.client.closed and h.upstream.closed
    assert h.client.frames() == []
