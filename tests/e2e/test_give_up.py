"""Issue 20, a client that gives up: what it left behind a throttle is dropped, never written late.

A producer whose request times out closes its connection; the requests it had pipelined behind
the throttle are still in kqp (read, not forwarded) or in kqp's muted socket. Forwarded after the
client left, they would write records the client has reported as failed, and, when it retries them
on a new connection, write them twice. kqp drops them (`kqp.proxy.connection.giving_up`): at the
client's EOF, or when the edge sees the close on the muted socket at its timer.

The scene, with `quotas.pacing: off` (the broker's long mutes; paced, these clients would not time
out at all): kafka-python 3 pinned to (0, 11) (Produce v3), 5 requests in flight of one 16 kB batch
each, a 2 s request timeout and 2 retries. producer_byte_rate 2000 B/s over 2 windows of 1 s: each
request is alone in its span when it is read, so it throttles for X = S / T - W = 16.4 kB / 2000 -
1 = ~7 s, and every request pipelined behind it times out after 2 s, long before the mute ends: a
request is only ever forwarded as the first of a connection, and answered at once. So the client's
own accounting is exact: each record it saw acknowledged must be upstream once, and each record it
saw fail must not be there at all.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.observability import metrics_url, sample, scrape
from helpers.quota_clients import message_value, read_partition, value_id
from helpers.quota_path import open_quota_path, quota_upstream
from helpers.topics import ensure_topic
from upstreams.launch import Upstream

pytestmark = pytest.mark.e2e

CLIENT_ID = "gives-up"
QUOTAS = {"pacing": "off", "window_size_seconds": 1, "window_count": 2,
          "entities": [{"client_id": CLIENT_ID, "producer_byte_rate": 2000}]}
RECORDS = 160                 # 10 batches of 16 records of 1 kB


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with quota_upstream(tmp_path_factory.mktemp("give-up")) as bootstrap:
        yield bootstrap


def produce_with_retries(bootstrap: str, topic: str) -> tuple[list[str], list[str], int]:
    """(acknowledged ids, failed ids, request timeouts seen) of RECORDS records."""
    from kafka import KafkaProducer
    from kafka.errors import RequestTimedOutError

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, client_id=CLIENT_ID, api_version=(0, 11), acks=1, linger_ms=20,
        batch_size=16 * 1024, request_timeout_ms=2000, retries=2, retry_backoff_ms=100,
        delivery_timeout_ms=40_000, max_in_flight_requests_per_connection=5, max_block_ms=30_000)
    try:
        futures = [producer.send(topic, message_value(CLIENT_ID, i), partition=0) for i in range(RECORDS)]
        producer.flush(timeout=60)
        acked, failed, timeouts = [], [], 0
        for i, future in enumerate(futures):
            assert future.is_done, f"record {i} unfinished after the delivery timeout"
            (failed if future.failed() else acked).append(value_id(message_value(CLIENT_ID, i)))
            timeouts += isinstance(future.exception, RequestTimedOutError)
        return acked, failed, timeouts
    finally:
        producer.close(timeout=10)


def test_requests_left_behind_a_throttle_by_a_client_that_gave_up_are_never_written(
        kqp: Any, upstream: Upstream) -> None:
    with contextlib.ExitStack() as stack:
        path = open_quota_path(stack, kqp, upstream, QUOTAS, metrics={"listen": "127.0.0.1:0"})
        topic = unique_topic("give-up")
        ensure_topic(upstream, topic, 1, upstream_kind=upstream.kind)
        acked, failed, _ = produce_with_retries(path.bootstrap, topic)
        gave_up = [c for c in path.client_tap.connections() if c.closed_by == "client" and c.unanswered_at_close]
        dropped = sample(scrape(metrics_url(path.kqp)), "kqp_requests_dropped_total") or 0
        stored = Counter(read_partition(upstream, topic))
    print(f"\ngive-up: {len(acked)} acked, {len(failed)} failed, {len(gave_up)} connections given up, "
          f"{dropped:.0f} requests dropped by kqp, {sum(stored.values())} records upstream")
    assert gave_up and failed, "the scene did not happen: no request timed out behind the throttle"
    assert acked, "nothing was acknowledged: the test says nothing about what lands"
    assert dropped > 0, "kqp dropped nothing that its clients had left behind"
    assert not [v for v, n in stored.items() if n > 1], "records written twice: a retry and a late forward"
    assert not set(failed) & set(stored), \
        f"{len(set(failed) & set(stored))} records the client saw fail were written upstream"
    assert set(acked) <= set(stored), "an acknowledged record is missing upstream"
