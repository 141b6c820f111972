"""KIP-219's test plan with real producers through kqp: a quota far below what the client offers.

Every test runs client -> client tap -> `kqp run` -> upstream tap -> one-broker mock cluster
(helpers.quota_path) and judges on the wire (helpers.quota_analysis):

- no request timed out: no delivery error with retries off, no client-counted timeout, and no
  connection the client closed while it was still owed a response;
- no message lost or duplicated: the partition, read straight from the upstream, holds exactly
  the acknowledged messages, each once;
- the upstream received the quota: the slope of its cumulative Produce bytes is within 10% of
  the quota once the first measured span (window_count x window_size) has passed, and no span
  carried much more;
- no request from a muted connection reached the upstream before its throttle had passed;
- the client saw the throttle: responses carried throttle_time_ms, and the client's own
  statistics recorded it wherever the client keeps any.

Quota windows are 0.2 s x 11 so that a 7 s offer covers 35 windows; one test keeps Kafka's
defaults (1 s x 11). The producers offer several MB/s (they do, unthrottled, on loopback) and
keep at most 64 KB queued locally, so the backlog left when the offer stops drains in well under
the 5 s request timeout.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.quota_analysis import (
    cumulative_slope,
    max_trailing_rate,
    mute_report,
    request_events,
    unanswered_closes,
)
from helpers.quota_clients import (
    BATCH_BYTES,
    FLOODS,
    VALUE_BYTES,
    ProduceRun,
    confluent_flood,
    confluent_floods,
    kafka_python_flood,
    read_partition,
)
from helpers.quota_path import QuotaPath, open_quota_path, quota_upstream
from helpers.topics import ensure_topic
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

QUOTA = 100_000                  # producer_byte_rate, bytes/s: ~100 KB/s against several MB/s offered
FAST_WINDOWS = {"window_size_seconds": 0.2, "window_count": 11}
OFFER_SECONDS = 7.0
RATE_TOLERANCE = 0.10
# A sampled-rate quota admits the request that crosses it, and a sample aging out lets a burst
# through: a span may briefly carry a little over its share, never a multiple.
SPAN_BURST_FACTOR = 1.3

OpenPath = Callable[..., QuotaPath]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with quota_upstream(tmp_path_factory.mktemp("quota-producers")) as bootstrap:
        yield bootstrap


@pytest.fixture
def quota_path(kqp: Any, upstream: Upstream) -> Iterator[OpenPath]:
    with contextlib.ExitStack() as stack:
        yield lambda quotas, **config: open_quota_path(stack, kqp, upstream, quotas, **config)


def producer_quota(client_id: str, rate: float = QUOTA, windows: dict[str, float] = FAST_WINDOWS,
                   **more: Any) -> dict[str, Any]:
    return {**windows, "entities": [{"client_id": client_id, "producer_byte_rate": rate}], **more}


def fresh_topic(upstream: Upstream, prefix: str) -> str:
    topic = unique_topic(prefix)
    ensure_topic(upstream, topic, 1, upstream_kind=upstream.kind)
    return topic


def assert_delivered_exactly_once(upstream: Upstream, topic: str, runs: list[ProduceRun]) -> None:
    stored = Counter(read_partition(upstream, topic))
    duplicated = sorted(v for v, n in stored.items() if n > 1)
    assert not duplicated, f"stored more than once: {duplicated[:10]}"
    for run in runs:
        assert not run.errors, f"{run.client}: delivery errors (a timed-out request, with retries off): " \
                               f"{run.errors[:5]}"
        assert run.request_timeouts in (None, 0), f"{run.client} counted {run.request_timeouts} request timeouts"
        assert len(run.acked) == run.sent, f"{run.client}: {run.sent - len(run.acked)} of {run.sent} unacknowledged"
        missing = [v for v in run.acked if v not in stored]
        assert not missing, f"{run.client}: {len(missing)} acknowledged messages not stored, e.g. {missing[:5]}"
    expected = {v for run in runs for v in run.acked}
    unexpected = sorted(set(stored) - expected)
    assert not unexpected, f"stored messages no producer sent: {unexpected[:10]}"


def assert_rate_held(path: QuotaPath, run: ProduceRun, quota: float, windows: dict[str, float]) -> float:
    """The upstream's Produce byte rate for `run`'s client id, judged after the first span."""
    events = request_events(path.upstream_tap.requests(client_id=run.client_id, api_key=ApiKey.Produce))
    assert events, f"{run.client}: no Produce request reached the upstream"
    span = windows["window_size_seconds"] * windows["window_count"]
    start, end = events[0][0] + span, run.offered_until
    assert end - start >= 2 * span, f"offer too short to judge: {end - start:.1f}s after the first span"
    rate = cumulative_slope(events, start, end)
    assert abs(rate - quota) <= RATE_TOLERANCE * quota, \
        f"{run.client}: upstream received {rate / 1000:.1f} KB/s against a quota of {quota / 1000:.1f} KB/s"
    peak = max_trailing_rate(events, span, start + span, end)   # spans clear of the first burst
    assert peak <= SPAN_BURST_FACTOR * quota, \
        f"{run.client}: one {span:.1f}s span carried {peak / 1000:.1f} KB/s (quota {quota / 1000:.1f} KB/s)"
    return rate


def assert_muted_and_told(path: QuotaPath, run: ProduceRun, *, client_keeps_metric: bool = True) -> None:
    report = mute_report(path.client_tap, path.upstream_tap, run.client_id)
    assert report.throttled_responses > 0, f"{run.client}: no response carried throttle_time_ms"
    assert report.checked == report.throttled_responses, \
        f"{run.client}: only {report.checked} of {report.throttled_responses} throttled responses could be checked"
    assert not report.breaches, f"{run.client}: requests reached the upstream while muted:\n" + \
        "\n".join(str(b) for b in report.breaches[:10])
    closes = unanswered_closes(path.client_tap)
    assert not closes, f"{run.client} gave up on requests (timed out): {closes}"
    if client_keeps_metric:
        assert run.throttle_seen_ms is not None and run.throttle_seen_ms > 0, \
            f"{run.client} recorded no throttle time of its own (saw {run.throttle_seen_ms})"


@pytest.mark.parametrize("client", sorted(FLOODS))
def test_producer_over_quota_is_held_to_it(client: str, quota_path: OpenPath, upstream: Upstream) -> None:
    client_id = f"flood-{client}"
    path = quota_path(producer_quota(client_id))
    topic = fresh_topic(upstream, f"quota-{client}")
    run = FLOODS[client](path.bootstrap, topic, client_id, OFFER_SECONDS)
    assert_rate_held(path, run, QUOTA, FAST_WINDOWS)
    # aiokafka has no throttle code: it neither backs off nor records throttle_time_ms.
    assert_muted_and_told(path, run, client_keeps_metric=client != "aiokafka")
    assert_delivered_exactly_once(upstream, topic, [run])


def test_producer_ignoring_throttle_time_is_held_by_muting_alone(quota_path: OpenPath, upstream: Upstream) -> None:
    """kafka-python with its KIP-219 back-off switched off: only kqp's muting can hold it."""
    client_id = "flood-deaf"
    path = quota_path(producer_quota(client_id))
    topic = fresh_topic(upstream, "quota-deaf")
    run = kafka_python_flood(path.bootstrap, topic, client_id, OFFER_SECONDS, client_throttling=False)
    assert_rate_held(path, run, QUOTA, FAST_WINDOWS)
    assert_muted_and_told(path, run)
    assert_delivered_exactly_once(upstream, topic, [run])


def test_two_clients_get_their_own_quota(quota_path: OpenPath, upstream: Upstream) -> None:
    """Two producers with different quotas on one upstream: each is held to its own rate."""
    quotas = {**FAST_WINDOWS, "entities": [{"client_id": "flood-slow", "producer_byte_rate": 100_000},
                                           {"client_id": "flood-fast", "producer_byte_rate": 250_000}]}
    path = quota_path(quotas)
    topic = fresh_topic(upstream, "quota-two")
    runs = confluent_floods(path.bootstrap, topic, ["flood-slow", "flood-fast"], OFFER_SECONDS)
    slow = assert_rate_held(path, runs["flood-slow"], 100_000, FAST_WINDOWS)
    fast = assert_rate_held(path, runs["flood-fast"], 250_000, FAST_WINDOWS)
    assert fast > 2 * slow, f"fast {fast:.0f} B/s is not its own quota apart from slow {slow:.0f} B/s"
    for run in runs.values():
        assert_muted_and_told(path, run)
    assert_delivered_exactly_once(upstream, topic, list(runs.values()))


def test_acks_zero_producer_is_muted_only(quota_path: OpenPath, upstream: Upstream) -> None:
    """acks=0 Produce has no response to carry a throttle: the mute alone holds the rate.

    The client cannot be held back by anything but the socket (no response to wait for), so it
    writes a fixed backlog, 9 s worth of quota, as fast as the socket takes it; the test then
    watches the upstream receive that backlog at the quota, and checks that nothing was dropped.
    """
    client_id = "flood-acks0"
    path = quota_path(producer_quota(client_id))
    topic = fresh_topic(upstream, "quota-acks0")
    # The first (window_count - 1) windows' worth passes at once: 9 s of quota lasts about 7 s.
    count = int(QUOTA * 9 / VALUE_BYTES)
    stored: list[str] = []

    def arrived() -> None:
        # The backlog sits in socket buffers and in kqp, and reaches the upstream at the quota.
        stored.extend(wait_for_records(upstream, topic, count, timeout=30))

    run = kafka_python_flood(path.bootstrap, topic, client_id, 30.0, acks=0, max_messages=count,
                             before_close=arrived)
    assert run.sent == count
    assert sorted(stored) == sorted(run.acked), "acks=0 records lost or duplicated on the way"
    events = request_events(path.upstream_tap.requests(client_id=client_id, api_key=ApiKey.Produce))
    span = FAST_WINDOWS["window_size_seconds"] * FAST_WINDOWS["window_count"]
    start, end = events[0][0] + span, events[-1][0]
    assert end - start >= 2 * span, f"the backlog arrived within {end - events[0][0]:.1f}s: not held"
    rate = cumulative_slope(events, start, end)
    assert abs(rate - QUOTA) <= RATE_TOLERANCE * QUOTA, \
        f"acks=0: upstream received {rate / 1000:.1f} KB/s against a quota of {QUOTA / 1000:.1f} KB/s"
    assert not path.client_tap.responses(api_key=ApiKey.Produce), "acks=0 Produce got responses"
    assert not unanswered_closes(path.client_tap)


def wait_for_records(upstream: Upstream, topic: str, count: int, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        stored = read_partition(upstream, topic)
        if len(stored) >= count or time.monotonic() >= deadline:
            return stored
        time.sleep(0.5)


def test_producer_at_kafka_default_windows(quota_path: OpenPath, upstream: Upstream) -> None:
    """Kafka's defaults, 11 windows of 1 s, where a short run is mostly the first allowance.

    A fresh key may send Kafka's first allowance, (window_count - 1) full windows of quota, at once;
    then the steady default holds it to the quota, each request throttled for its own cost (16 KB
    at 50 kB/s: ~0.33 s, never more than a window told). Judging the long-run rate needs longer
    (tests/e2e/test_fidelity_matrix.py); this test checks what holds from the first throttle on: no
    timeouts, nothing lost, the mute, the throttle seen, the allowance granted and not exceeded,
    and the throttle told a request's cost.
    """
    client_id = "flood-defaults"
    windows = {"window_size_seconds": 1, "window_count": 11}
    quota = 50_000
    path = quota_path(producer_quota(client_id, quota, windows))
    topic = fresh_topic(upstream, "quota-defaults")
    # A 16 KB local queue: what is left when the offer ends drains in a few throttles.
    run = confluent_flood(path.bootstrap, topic, client_id, 5.0, **{"queue.buffering.max.kbytes": 16})
    assert_delivered_exactly_once(upstream, topic, [run])
    assert_muted_and_told(path, run)
    events = request_events(path.upstream_tap.requests(client_id=client_id, api_key=ApiKey.Produce))
    elapsed = run.offered_until - events[0][0]
    received = sum(size for at, size in events if at <= run.offered_until)
    allowance = quota * (windows["window_count"] - 1) * windows["window_size_seconds"]
    bound = allowance + quota * elapsed + 2 * BATCH_BYTES
    assert received <= bound, f"upstream got {received} B in {elapsed:.1f}s, more than the {bound:.0f} B allowed"
    assert received >= 0.9 * allowance, f"upstream got {received} B: the initial allowance was not granted"
    longest = max(r.throttle_ms or 0 for r in path.client_tap.responses(api_key=ApiKey.Produce))
    cost_ms = BATCH_BYTES / quota * 1000
    assert 0.5 * cost_ms <= longest <= 1000 + 5, f"longest throttle {longest} ms: a request's cost is {cost_ms:.0f} ms"
