"""Request quotas with a client that sends small requests as fast as it can, and idle muted connections.

KIP-124's first scenario: a consumer with fetch.wait.max.ms=0 on an empty topic turns every Fetch
around at once, a stream of tiny requests that no byte rate would ever catch. `request_rate`
(requests/s, the KIP's first draft) and `request_percentage` (percent of one thread of kqp's
handler time) must each hold it; both throttles are capped at one window (200 ms here), so a
burst can never silence the client, heartbeats included, for long.

acks=0 Produce is exempt from both, as in Kafka: it has no response to carry a throttle, so a
pipelined run of them must reach the upstream at once, while the same run with acks=1 is held.

Last, Kafka's connections.max.idle.ms applies to muted connections too: a connection muted for
half a minute by a byte-rate throttle is still closed once it has been idle for the configured
time, even if the client has a request waiting in its socket.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from helpers.names import unique_topic
from helpers.net import read_until_eof, split_host_port
from helpers.quota_analysis import cumulative_slope, mute_report, unanswered_closes
from helpers.quota_frames import produce_frame, read_responses
from helpers.quota_path import QuotaPath, open_quota_path, quota_upstream
from helpers.topics import ensure_topic
from kafka.protocol.producer import ProduceResponse
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

WINDOWS = {"window_size_seconds": 0.2, "window_count": 11}
SPAN = WINDOWS["window_size_seconds"] * WINDOWS["window_count"]
CAP_MS = WINDOWS["window_size_seconds"] * 1000
SPIN_SECONDS = 6.0

OpenPath = Callable[..., QuotaPath]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with quota_upstream(tmp_path_factory.mktemp("quota-requests")) as bootstrap:
        yield bootstrap


@pytest.fixture
def quota_path(kqp: Any, upstream: Upstream) -> Iterator[OpenPath]:
    with contextlib.ExitStack() as stack:
        yield lambda quotas, **config: open_quota_path(stack, kqp, upstream, quotas, **config)


def empty_topic(upstream: Upstream, prefix: str) -> str:
    topic = unique_topic(prefix)
    ensure_topic(upstream, topic, 1, upstream_kind=upstream.kind)
    return topic


def spin_fetches(bootstrap: str, topic: str, client_id: str, seconds: float) -> tuple[float, float]:
    """A consumer fetching an empty partition with fetch.wait.max.ms=0 for `seconds`: (start, end)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "group.id": f"kqp-test-{client_id}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 0, "fetch.error.backoff.ms": 0,
                         "socket.timeout.ms": 5000, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    start = time.monotonic()
    deadline = start + seconds
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            assert msg is None or msg.error() is None, f"unexpected message or error on an empty topic: {msg}"
    finally:
        end = time.monotonic()
        consumer.close()
    return start, end


def request_events(path: QuotaPath, client_id: str, start: float, end: float) -> list[tuple[float, int]]:
    """Every request of `client_id` that reached the upstream in [start, end], counted as 1."""
    return [(r.at, 1) for r in path.upstream_tap.requests(client_id=client_id) if start <= r.at <= end]


def assert_mutes_kept(path: QuotaPath, client_id: str) -> list[int]:
    report = mute_report(path.client_tap, path.upstream_tap, client_id)
    assert report.throttled_responses > 0, "no response carried throttle_time_ms"
    assert not report.breaches, "requests reached the upstream while muted:\n" + \
        "\n".join(str(b) for b in report.breaches[:10])
    assert not unanswered_closes(path.client_tap, ignore=frozenset({ApiKey.Fetch}))
    return report.throttle_ms


def test_request_rate_holds_a_spinning_consumer(quota_path: OpenPath, upstream: Upstream) -> None:
    client_id = "spin-rate"
    rate = 40.0
    path = quota_path({**WINDOWS, "entities": [{"client_id": client_id, "request_rate": rate}]})
    topic = empty_topic(upstream, "spin-rate")
    start, end = spin_fetches(path.bootstrap, topic, client_id, SPIN_SECONDS)
    events = request_events(path, client_id, start, end)
    assert len(events) > 3 * SPAN * rate, f"only {len(events)} requests: the client did not spin"
    measured = cumulative_slope(events, events[0][0] + SPAN, end)
    assert abs(measured - rate) <= 0.15 * rate, \
        f"upstream received {measured:.1f} requests/s against a request_rate of {rate:.0f}"
    throttles = assert_mutes_kept(path, client_id)
    assert max(throttles) <= CAP_MS + 1, f"request_rate throttles are capped at one window: {max(throttles)} ms"


def test_request_percentage_holds_a_spinning_consumer(quota_path: OpenPath, upstream: Upstream) -> None:
    """1% of one thread: 10 ms of kqp's event loop per second for this client, far below its appetite."""
    client_id = "spin-percent"
    topic = empty_topic(upstream, "spin-percent")
    # Unthrottled first, through the same kqp: what the client asks for.
    path = quota_path({**WINDOWS, "entities": [{"client_id": client_id, "request_percentage": 1}]})
    free_start, free_end = spin_fetches(path.bootstrap, topic, "spin-free", 2.0)
    free = request_events(path, "spin-free", free_start, free_end)
    free_rate = cumulative_slope(free, free_start + 0.5, free_end)
    start, end = spin_fetches(path.bootstrap, topic, client_id, SPIN_SECONDS)
    events = request_events(path, client_id, start, end)
    held_rate = cumulative_slope(events, events[0][0] + SPAN, end)
    # A request costs kqp well under a millisecond of loop time, so 1% still admits some requests
    # per second; it must be a small fraction of what the same client sends unthrottled.
    assert held_rate < 0.5 * free_rate, \
        f"request_percentage 1% left {held_rate:.0f} requests/s of the {free_rate:.0f} the client sends freely"
    assert held_rate > 1.0, f"the client was starved ({held_rate:.2f} requests/s): the throttle is capped"
    throttles = assert_mutes_kept(path, client_id)
    assert max(throttles) <= CAP_MS + 1, \
        f"request_percentage throttles are capped at one window: {max(throttles)} ms"
    assert not mute_report(path.client_tap, path.upstream_tap, "spin-free").throttled_responses, \
        "the unthrottled client id was throttled"


def test_idle_connection_is_closed_while_muted(quota_path: OpenPath, upstream: Upstream) -> None:
    """A byte-rate throttle of ~28 s, connections_max_idle_ms 500: the idle limit wins."""
    client_id = "idle-muted"
    idle_ms = 500
    # Kafka's sampled rate: the throttle is told at once (a steady quota would hold the request first).
    path = quota_path({**WINDOWS, "algorithm": "sampled",
                       "entities": [{"client_id": client_id, "producer_byte_rate": 1000}]},
                      connections_max_idle_ms=idle_ms)
    topic = empty_topic(upstream, "idle-muted")
    host, port = split_host_port(path.bootstrap)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(produce_frame(topic, 7, 1, client_id))
        ((answered_at, frame),) = read_responses(sock, 1, timeout=10)
        throttle_ms = ProduceResponse.decode(frame, version=7, header=True).throttle_time_ms
        assert throttle_ms > 10_000, f"expected a long byte-rate throttle, got {throttle_ms} ms"
        sock.sendall(produce_frame(topic, 7, 2, client_id))   # waits in the muted socket
        rest, closed = read_until_eof(sock, timeout=5.0)
        closed_after = time.monotonic() - answered_at
    assert closed, "kqp kept an idle muted connection open"
    assert rest == b"", "the request sent while muted was answered"
    assert idle_ms / 1000 * 0.8 <= closed_after <= idle_ms / 1000 + 2.0, \
        f"closed {closed_after:.2f}s after the last activity; connections_max_idle_ms is {idle_ms}"
    produced = [r.correlation_id for r in path.upstream_tap.requests(client_id=client_id, api_key=ApiKey.Produce)]
    assert produced == [1], f"the request sent while muted reached the upstream: {produced}"
    path.kqp.wait_for_log(f"idle for more than {idle_ms} ms", timeout=5)


def test_acks_zero_produce_is_exempt_from_request_rate(quota_path: OpenPath, upstream: Upstream) -> None:
    """KIP-124: acks=0 Produce is exempt from request quotas (it has no response to throttle);
    only byte rates may mute it. 60 pipelined acks=0 requests under `request_rate: 2`, no byte
    quota, must all reach the upstream at once; 60 acks=1 requests under the same quota are the control.

    Kafka's arithmetic for the control, 2 requests/s with 0.2 s x 11 windows: a fresh sensor counts
    (11 - 1) x 0.2 s = 2 s of history, so about 2 x 2 = 4 requests pass, and every later one is over
    (O = n / 2.2 s > 2) by X = (O - T) / T x W, seconds, capped at one window, 200 ms. kqp forwards
    one request at a time for a request_rate entity, so the other ~56 each wait their 200 ms
    throttle: ~11 s, where acks=0 takes milliseconds.
    """
    exempt_id, control_id = "acks-zero", "acks-one"
    count = 60
    path = quota_path({**WINDOWS, "entities": [{"client_id": exempt_id, "request_rate": 2},
                                               {"client_id": control_id, "request_rate": 2}]})
    topic = empty_topic(upstream, "acks-zero")
    address = split_host_port(path.bootstrap)

    frames = [produce_frame(topic, 7, corr, exempt_id, records=1, acks=0) for corr in range(1, count + 1)]
    # One acks=1 request behind them: its response proves every acks=0 request was forwarded, and
    # its throttle that none of them was charged to the request rate (it is within the allowance).
    frames.append(produce_frame(topic, 7, count + 1, exempt_id, records=1, acks=1))
    with socket.create_connection(address, timeout=10) as sock:
        sent_at = time.monotonic()
        sock.sendall(b"".join(frames))
        # Bounded well past the ~12 s that charging each acks=0 request a capped throttle would take.
        ((_, frame),) = read_responses(sock, 1, timeout=30)
    probe = ProduceResponse.decode(frame, version=7, header=True)
    assert probe.header.correlation_id == count + 1, "a response to an acks=0 request reached the client"
    exempt = [r for r in path.upstream_tap.requests(client_id=exempt_id, api_key=ApiKey.Produce)
              if not r.expects_response]
    assert len(exempt) == count, f"{len(exempt)} of {count} acks=0 requests reached the upstream"
    took = exempt[-1].at - sent_at
    assert took < 2.0, f"{count} acks=0 requests took {took:.1f}s to reach the upstream: the connection was held"
    assert probe.throttle_time_ms == 0, \
        f"the acks=1 request after {count} acks=0 ones was throttled {probe.throttle_time_ms} ms: they were charged"

    control = [produce_frame(topic, 7, corr, control_id, records=1, acks=1) for corr in range(1, count + 1)]
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(b"".join(control))
        answered = read_responses(sock, count, timeout=40)
    throttles = [ProduceResponse.decode(f, version=7, header=True).throttle_time_ms for _, f in answered]
    throttled = [ms for ms in throttles if ms > 0]
    assert len(throttled) >= count - 8, f"only {len(throttled)} of {count} acks=1 responses were throttled"
    assert max(throttled) <= CAP_MS + 1, f"request_rate throttles are capped at one window: {max(throttled)} ms"
    reached = [r.at for r in path.upstream_tap.requests(client_id=control_id, api_key=ApiKey.Produce)]
    assert len(reached) == count
    held = reached[-1] - reached[0]
    # Each throttled request waits out the one before it: at least their sum, less scheduling slack.
    assert held >= 0.8 * sum(throttled[:-1]) / 1000, \
        f"{count} acks=1 requests reached the upstream within {held:.1f}s despite {sum(throttled)} ms of throttles"
    assert held > 5 * took, f"the control ({held:.1f}s) was not held much longer than acks=0 ({took:.2f}s)"
    assert_mutes_kept(path, control_id)
