"""Issue 21's capacity pool with real producers through `kqp run`, judged on the wire.

The issue's config as written (an `ingest` pool of 300 kB/s, job-a- weight 3, job-b- and job-c-
weight 1, 0.2 s x 11 windows), on test_quota_producers' path: confluent-kafka producers (several
MB/s each on loopback, retries off, 5 s request timeout) -> client tap -> kqp -> upstream tap ->
one-broker mock cluster. Rates are least-squares slopes of what the upstream tap saw, from two spans
after a producer's first request (Kafka's first burst and its echo have passed), over several seconds:

- two jobs flat out: together at most 1.08 x the budget, split 3:1 within 8 points; then job-b-1
  alone, once job-a-1 stops: at least 0.85 x the budget;
- a returning job (job-a-2, after a silence longer than a span): its share within a second;
- under-use: job-b-1 offering 50 kB/s (under its 75 kB/s share) gets all of it, never throttled,
  and job-a-1 gets the rest;

and in every case no client errs or times out, and the partition holds exactly what was acknowledged.
Across instances (the same split through two kqp sharing a Redis): test_pools_fleet.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from helpers.fleet_path import run_all
from helpers.pool_config import BUDGET, issue_pool
from helpers.quota_analysis import cumulative_slope, mute_report, request_events
from helpers.quota_clients import ProduceRun, confluent_flood
from upstreams.launch import Upstream

from e2e import test_quota_producers as producers
from e2e.test_quota_groups import produce_events
from e2e.test_quota_producers import OpenPath, assert_delivered_exactly_once, fresh_topic
from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e
upstream = producers.upstream
quota_path = producers.quota_path

ISSUE = issue_pool()   # the issue's config, as written
SPAN = 0.2 * 11


def job(bootstrap: str, topic: str, client_id: str, seconds: float, *, delay: float = 0.0,
        offer: float | None = None) -> Callable[[], ProduceRun]:
    """One producer's run; each gets a topic of its own (the mock cluster keeps about 5 MB a partition)."""
    def run() -> ProduceRun:
        time.sleep(delay)   # the test's own schedule: kqp never waits
        return confluent_flood(bootstrap, topic, client_id, seconds, offer_bytes_s=offer)
    return run


def rate(path: object, client_id: str, start: float, end: float) -> float:
    events = produce_events(path, client_id)   # type: ignore[arg-type]
    assert events, f"{client_id}: no Produce request reached the upstream"
    assert end - start >= 2.0, f"{client_id}: {end - start:.1f}s is too short to judge"
    return cumulative_slope(events, start, end)


def first_request(path: object, client_id: str) -> float:
    return produce_events(path, client_id)[0][0]   # type: ignore[arg-type]


def test_two_jobs_split_the_budget_3_to_1_and_one_alone_takes_it(quota_path: OpenPath, upstream: Upstream) -> None:
    path = quota_path(ISSUE)
    topics = [fresh_topic(upstream, "pool-ingest") for _ in range(2)]
    a_run, b_run = run_all([job(path.bootstrap, topics[0], "job-a-1", 14.0),
                            job(path.bootstrap, topics[1], "job-b-1", 22.0)])
    start = max(first_request(path, "job-a-1"), first_request(path, "job-b-1")) + 2 * SPAN
    stop = a_run.offered_until
    a, b = rate(path, "job-a-1", start, stop), rate(path, "job-b-1", start, stop)
    alone = rate(path, "job-b-1", stop + 1.0, b_run.offered_until)
    print(f"\nPOOL two jobs: {(a + b) / BUDGET:.3f} x budget, job-a-1 {a / (a + b):.3f} of it "
          f"({a / 1000:.1f} + {b / 1000:.1f} kB/s over {stop - start:.1f}s); job-b-1 alone {alone / BUDGET:.3f} x "
          f"budget over {b_run.offered_until - stop - 1.0:.1f}s")
    assert a + b <= 1.08 * BUDGET, f"together {(a + b) / 1000:.1f} kB/s for a budget of 300 kB/s"
    assert abs(a / (a + b) - 0.75) <= 0.08, f"job-a-1 took {a / (a + b):.3f} of the pool, weight 3 of 4"
    assert alone >= 0.85 * BUDGET, f"job-b-1 alone got {alone / 1000:.1f} kB/s of 300 kB/s"
    delivered(upstream, topics, [a_run, b_run])


def test_a_returning_job_gets_its_share_within_a_second(quota_path: OpenPath, upstream: Upstream) -> None:
    path = quota_path(ISSUE)
    topics = [fresh_topic(upstream, "pool-return") for _ in range(3)]
    # job-a-1 stops at 5 s; job-a-2 (the same job, another executor) starts at 9 s: silent longer than a span.
    runs = run_all([job(path.bootstrap, topics[0], "job-a-1", 5.0),
                    job(path.bootstrap, topics[1], "job-a-2", 9.0, delay=9.0),
                    job(path.bootstrap, topics[2], "job-b-1", 18.0)])
    back = first_request(path, "job-a-2")
    events = produce_events(path, "job-a-2")
    first_second = sum(size for at, size in events if back <= at < back + 1.0)
    a = rate(path, "job-a-2", back + 2 * SPAN, runs[1].offered_until)
    b = rate(path, "job-b-1", back + 2 * SPAN, runs[1].offered_until)
    print(f"\nPOOL returning job: {first_second / 1000:.1f} kB in its first second (share 225 kB/s); then "
          f"job-a-2 {a / (a + b):.3f} of {(a + b) / BUDGET:.3f} x budget")
    assert first_second >= 225_000, f"job-a-2 got {first_second / 1000:.1f} kB in its first second back"
    assert abs(a / (a + b) - 0.75) <= 0.1, f"after its return job-a-2 took {a / (a + b):.3f} of the pool"
    assert a + b <= 1.1 * BUDGET
    delivered(upstream, topics, runs)


def test_under_use_gets_all_it_offers_and_the_rest_goes_to_the_other(quota_path: OpenPath, upstream: Upstream) -> None:
    path = quota_path(ISSUE)
    topics = [fresh_topic(upstream, "pool-under") for _ in range(2)]
    a_run, b_run = run_all([job(path.bootstrap, topics[0], "job-a-1", 14.0),
                            job(path.bootstrap, topics[1], "job-b-1", 14.0, offer=50_000)])   # under its 75 kB/s
    start = first_request(path, "job-b-1") + 2 * SPAN
    stop = min(a_run.offered_until, b_run.offered_until)
    a, b = rate(path, "job-a-1", start, stop), rate(path, "job-b-1", start, stop)
    # What job-b-1 offered on the wire (record and request headers on top of its 50 kB/s of values)
    offer = cumulative_slope(request_events(path.client_tap.requests(client_id="job-b-1", api_key=ApiKey.Produce)),
                             start, stop)
    report = mute_report(path.client_tap, path.upstream_tap, "job-b-1")
    print(f"\nPOOL under-use: job-b-1 offered {offer / 1000:.1f} kB/s, got {b / 1000:.1f} kB/s "
          f"({report.throttled_responses} throttled responses); job-a-1 {a / 1000:.1f} kB/s; together "
          f"{(a + b) / BUDGET:.3f} x budget")
    assert abs(b - offer) <= 0.05 * offer, f"job-b-1 offered {offer / 1000:.1f} kB/s and got {b / 1000:.1f} kB/s"
    assert report.throttled_responses == 0, "job-b-1 was throttled although under its share"
    assert a >= 0.78 * BUDGET, f"job-a-1 got {a / 1000:.1f} kB/s of the 250 kB/s job-b-1 left"
    assert a + b <= 1.08 * BUDGET
    delivered(upstream, topics, [a_run, b_run])


def delivered(upstream: Upstream, topics: list[str], runs: list[ProduceRun]) -> None:
    """No client erred or timed out, and each topic holds exactly what its producer was acknowledged."""
    for topic, run in zip(topics, runs, strict=True):
        assert_delivered_exactly_once(upstream, topic, [run])
