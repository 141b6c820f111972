"""KIP-219 for clients that predate it: the response still goes out at once; the mute protects.

A Produce v3/v4 response does not honour client-side throttling (ProduceResponse.shouldClientThrottle
is v6+), so a client reading it will not back off by itself. Since KIP-219 a broker still answers at
once (a held response makes such clients time out) and mutes the channel: "the broker is protected
by virtue of muting the channel". The old client's next request simply waits in the muted socket.
v7 is the control and behaves the same on the wire. Every version carries the throttle in
throttle_time_ms. v3 is Kafka 0.11's version. v5 runs against Tansu: librdkafka's mock cluster
answers it without its log_start_offset field, which no client can decode.

The client is a plain socket sending frames built with kafka-python's ProduceRequest, three
pipelined requests of ~30 KB against a 20 KB/s quota (0.2 s x 11 windows: a 40 KB initial
allowance), so the second crosses the quota by Kafka's arithmetic, X = (O - T) / T * W =
(60 KB / 2 s - 20 KB/s) / 20 KB/s * 2 s = 1 s, and the third waits behind it inside kqp.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.net import split_host_port
from helpers.quota_frames import produce_frame, read_responses
from helpers.quota_path import QuotaPath, open_quota_path, quota_upstream
from helpers.topics import ensure_topic
from kafka.protocol.producer import ProduceResponse
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

QUOTA = 20_000
# Kafka's sampled rate: the arithmetic above is a broker's.
WINDOWS = {"window_size_seconds": 0.2, "window_count": 11, "algorithm": "sampled"}
EXPECTED_THROTTLE = 1.0           # seconds, for the second request (docstring arithmetic)
SLACK = 0.15


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with quota_upstream(tmp_path_factory.mktemp("quota-old")) as bootstrap:
        yield bootstrap


@pytest.mark.parametrize("version", [3, 4, 7])
def test_produce_response_at_once_and_the_next_request_muted(version: int, kqp: Any, upstream: Upstream) -> None:
    assert_answered_at_once_then_muted(version, kqp, upstream)


def test_produce_v5_response_at_once_and_the_next_request_muted(kqp: Any, tansu: Upstream) -> None:
    """Produce v5 (Kafka 1.0: log_start_offset in each partition response) against Tansu, which
    answers it whole; librdkafka's mock cluster leaves that field out."""
    assert_answered_at_once_then_muted(5, kqp, tansu)


def assert_answered_at_once_then_muted(version: int, kqp: Any, upstream: Upstream) -> None:
    client_id = f"old-v{version}"
    with contextlib.ExitStack() as stack:
        path: QuotaPath = open_quota_path(stack, kqp, upstream, {
            **WINDOWS, "entities": [{"client_id": client_id, "producer_byte_rate": QUOTA}]})
        topic = unique_topic(f"old-v{version}")
        ensure_topic(upstream, topic, 1, upstream_kind=upstream.kind)
        frames = [produce_frame(topic, version, corr, client_id) for corr in (1, 2, 3)]
        with socket.create_connection(split_host_port(path.bootstrap), timeout=10) as sock:
            sent_at = time.monotonic()
            sock.sendall(b"".join(frames))          # pipelined, as a client with in-flight requests
            responses = read_responses(sock, 3, timeout=15)

        decoded = [(at, ProduceResponse.decode(frame, version=version, header=True)) for at, frame in responses]
        assert [r.header.correlation_id for _, r in decoded] == [1, 2, 3], "responses out of order"
        for _, response in decoded:
            for topic_response in response.responses:
                for partition in topic_response.partition_responses:
                    assert partition.error_code == 0, f"produce failed: {partition}"
        (at1, first), (at2, second), (_, third) = decoded
        assert at1 - sent_at < 0.5 and first.throttle_time_ms == 0, \
            f"the first request is within the initial allowance: {at1 - sent_at:.2f}s, {first.throttle_time_ms} ms"
        # Kafka's arithmetic gives 1 s; allow for the upstream's latency before kqp measured.
        assert abs(second.throttle_time_ms / 1000 - EXPECTED_THROTTLE) <= SLACK, \
            f"throttle_time_ms {second.throttle_time_ms}, expected about {EXPECTED_THROTTLE * 1000:.0f}"
        assert third.throttle_time_ms > 0, "the third request is over the quota too"

        upstream_at = {r.correlation_id: r.at for r in path.upstream_tap.requests(client_id=client_id,
                                                                                  api_key=ApiKey.Produce)}
        answered_at = {r.correlation_id: r.at for r in path.upstream_tap.responses(api_key=ApiKey.Produce)}
        throttle = second.throttle_time_ms / 1000
        held_for = at2 - answered_at[2]
        assert held_for < SLACK + 0.1, f"v{version} response held {held_for:.2f}s: it should go out at once"
        # The connection was muted: the third request reached the upstream only after the
        # throttle, though the client had sent it with the second.
        waited = upstream_at[3] - answered_at[2]
        assert waited >= throttle - SLACK, \
            f"the pipelined third request reached the upstream {waited:.2f}s into a {throttle:.2f}s throttle"
