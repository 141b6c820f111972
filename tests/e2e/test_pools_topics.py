"""A topic pool on the forwarding path (issue 21): one budget for a topic's bytes, across brokers.

Producers: two producers (confluent-kafka, 1 KB records, flat out) write the same topic through kqp, each to a
partition whose leader is a different broker of librdkafka's three-broker mock cluster, so each
sends its Produce requests over its own broker connection (checked at the upstream tap: each
client's requests reached one broker, and not the same one). A topic pool of producer_byte_rate Q
covers the topic and takes everyone (no `members:`): each producer is a member of its own, weight 1.
kqp reads the records bytes per topic of each Produce request only because that pool exists.
Consumers: the same with two consumers, each reading its own partition of a preloaded backlog
(assigned, no group), held by a topic pool of consumer_byte_rate to its budget.

Windows are 0.2 s x 11; the offer lasts 20 s and the rates are judged after the first two spans
(Kafka's sampled rate lets a new member's first windows through and echoes them once), by the
upstream tap's request bytes per second (least-squares slope), so a busy machine shifts no figure.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from helpers.fleet_path import run_all
from helpers.quota_analysis import Event, cumulative_slope, fetch_response_events, request_events
from helpers.quota_clients import confluent_flood, preload
from helpers.quota_consumers import confluent_drain
from helpers.quota_path import open_quota_path
from helpers.topics import spread_mock_topic
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

Q = 100_000                       # the topic pool's producer_byte_rate, bytes/s
WINDOWS = {"window_size_seconds": 0.2, "window_count": 11}
SPAN = WINDOWS["window_size_seconds"] * WINDOWS["window_count"]
OFFER_SECONDS = 20.0
CLIENTS = ("topic-writer-a", "topic-writer-b")
READERS = ("topic-reader-a", "topic-reader-b")
QC = 200_000                      # the consumer topic pool's consumer_byte_rate, bytes/s
BACKLOG = 5000                    # 1 KB records per partition: more than READ_SECONDS at QC lets through
READ_SECONDS = 20.0


def partitions_on_two_leaders(upstream: Upstream, prefix: str) -> tuple[str, tuple[int, int]]:
    """A new topic, and two of its partitions whose leaders differ."""
    topic, leaders = spread_mock_topic(upstream, prefix)
    first = min(leaders)
    return topic, (first, next(p for p in sorted(leaders) if leaders[p] != leaders[first]))


def test_a_topic_pool_holds_two_producers_on_two_brokers_to_its_budget(kqp: Any, mock_cluster: Upstream) -> None:
    if mock_cluster.kind != "mock":
        pytest.skip("places the two producers on two brokers of the three-broker mock (KQP_TEST_BOOTSTRAP is set)")
    topic, (first, other) = partitions_on_two_leaders(mock_cluster, "pool-topic")
    quotas = {**WINDOWS, "pools": [{"name": "events", "producer_byte_rate": Q, "topics": [topic]}]}
    with contextlib.ExitStack() as stack:
        path = open_quota_path(stack, kqp, mock_cluster, quotas)
        runs = run_all([lambda client=client, partition=partition: confluent_flood(
            path.bootstrap, topic, client, OFFER_SECONDS, first_partition=partition)
            for client, partition in zip(CLIENTS, (first, other), strict=True)])
        requests = {c: path.upstream_tap.requests(client_id=c, api_key=ApiKey.Produce) for c in CLIENTS}
    for run in runs:
        assert not run.errors, f"{run.client_id}: delivery errors {run.errors[:5]}"
    hops = {c: {r.hop for r in requests[c]} for c in CLIENTS}
    assert all(len(h) == 1 for h in hops.values()) and hops[CLIENTS[0]] != hops[CLIENTS[1]], hops
    total, rates = judged({c: request_events(requests[c]) for c in CLIENTS}, min(r.offered_until for r in runs))
    print(f"\nTOPIC POOL produce {total / Q:.3f} Q together "
          f"({', '.join(f'{c} {r / Q:.3f} Q' for c, r in rates.items())}), brokers {sorted(hops.values())}")
    assert 0.85 * Q <= total <= 1.08 * Q, f"the topic got {total / Q:.3f} x its pool's budget"
    for client, rate in rates.items():
        assert 0.4 <= rate / total <= 0.6, f"{client} took {rate / total:.2f} of the topic's bytes"


def judged(events: dict[str, list[Event]], end: float) -> tuple[float, dict[str, float]]:
    """The clients' rate together and each one's, after the first two spans, up to `end`."""
    start = min(e[0][0] for e in events.values()) + 2 * SPAN
    assert end - start >= 6 * SPAN, f"too short to judge: {end - start:.1f}s"
    rates = {c: cumulative_slope(e, start, end) for c, e in events.items()}
    return cumulative_slope([x for e in events.values() for x in e], start, end), rates


def test_a_consumer_topic_pool_holds_two_consumers_on_two_brokers_to_its_budget(kqp: Any,
                                                                                mock_cluster: Upstream) -> None:
    if mock_cluster.kind != "mock":
        pytest.skip("places the two consumers on two brokers of the three-broker mock (KQP_TEST_BOOTSTRAP is set)")
    topic, partitions = partitions_on_two_leaders(mock_cluster, "pool-topic-read")
    for partition in partitions:
        preload(mock_cluster, topic, BACKLOG, partition=partition)
    quotas = {**WINDOWS, "pools": [{"name": "reads", "consumer_byte_rate": QC, "topics": [topic]}]}
    with contextlib.ExitStack() as stack:
        path = open_quota_path(stack, kqp, mock_cluster, quotas)
        runs = run_all([lambda client=client, partition=partition: confluent_drain(
            path.bootstrap, topic, client, 2 * BACKLOG, READ_SECONDS, partition=partition)
            for client, partition in zip(READERS, partitions, strict=True)])
        events = {c: fetch_response_events(path.upstream_tap, c) for c in READERS}
        hops = {c: {r.hop for r in path.upstream_tap.requests(client_id=c, api_key=ApiKey.Fetch)} for c in READERS}
    assert all(len(h) == 1 for h in hops.values()) and hops[READERS[0]] != hops[READERS[1]], hops
    assert all(len(run.values) < BACKLOG for run in runs), "a consumer read its whole backlog: nothing held it"
    total, rates = judged(events, min(run.finished for run in runs))
    print(f"\nTOPIC POOL fetch {total / QC:.3f} Q together "
          f"({', '.join(f'{c} {r / QC:.3f} Q' for c, r in rates.items())}), brokers {sorted(hops.values())}")
    assert 0.85 * QC <= total <= 1.10 * QC, f"the topic gave {total / QC:.3f} x its pool's budget"
    for client, rate in rates.items():
        assert 0.4 <= rate / total <= 0.6, f"{client} took {rate / total:.2f} of the topic's bytes"
