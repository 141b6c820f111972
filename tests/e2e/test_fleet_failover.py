"""Redis killed in the middle of a run: clients never notice, each instance falls back to its share.

Three `kqp run` instances in cluster scope share a user quota Q (`/users/ANONYMOUS`); three
confluent-kafka producers, one per instance, each under its own client id so that the upstream tap
tells the instances' traffic apart. Twenty seconds of offer; Redis is SIGKILLed after six and
started again, empty, on the same port after thirteen.

- No delivery error, no request timed out: no client request ever waited for Redis.
- Within a second of the kill every instance reports `kqp_fleet_sync_up` 0 and a quota share of
  1/3 (the three instances it last counted).
- During the outage the upstream receives about Q (three shares of Q/3), and no instance takes much
  more than its share.
- Within two seconds of Redis's return every instance shares again, and the fleet is held to Q.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.fleet_path import SPAN, all_report, assert_served_throughout, fleet_rate, flood_while, user_quota_fleet
from helpers.names import unique_topic
from helpers.observability import sample
from helpers.quota_path import quota_upstream
from helpers.redis_server import RedisServer, needs_redis
from helpers.topics import ensure_topic
from upstreams.launch import Upstream

pytestmark = [pytest.mark.e2e, needs_redis]

QUOTA = 150_000
INSTANCES = 3
OFFER_SECONDS = 20.0
KILL_AT, RESTART_AT = 6.0, 13.0


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with quota_upstream(tmp_path_factory.mktemp("fleet-failover")) as bootstrap:
        yield bootstrap


def test_redis_killed_mid_run(kqp: Any, upstream: Upstream, tmp_path: Path) -> None:
    prefix = unique_topic("fleet-failover")
    topics = [unique_topic(f"fleet-failover-{i}") for i in range(INSTANCES)]
    for topic in topics:
        ensure_topic(upstream, topic, 1, upstream_kind=upstream.kind)
    redis = RedisServer(tmp_path / "redis.log").start()
    timeline: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        stack.callback(redis.stop)
        fleet, urls = user_quota_fleet(stack, kqp, upstream, INSTANCES, QUOTA, redis.url)

        def operate(started: float) -> None:
            time.sleep(max(0.0, started + KILL_AT - time.monotonic()))
            redis.kill()
            timeline["killed"] = time.monotonic()
            timeline["alone_after"] = all_report(urls, lambda s: sample(s, "kqp_fleet_sync_up", backend="redis")
                                                 == 0.0 and sample(s, "kqp_fleet_quota_share", backend="redis")
                                                 == pytest.approx(1 / INSTANCES), 5)
            time.sleep(max(0.0, started + RESTART_AT - time.monotonic()))
            redis.start()
            timeline["restarted"] = time.monotonic()
            timeline["shared_after"] = all_report(urls, lambda s: sample(s, "kqp_fleet_sync_up", backend="redis")
                                                  == 1.0, 5)

        _, runs, failures = flood_while(fleet, topics, prefix, OFFER_SECONDS, operate, 15)
        ids = [run.client_id for run in runs]
        events = fleet.produce_events(ids)
        per_instance = [fleet.produce_events([cid]) for cid in ids]
    assert not failures, failures
    assert_served_throughout(runs)
    killed, restarted, end = timeline["killed"], timeline["restarted"], min(r.offered_until for r in runs)
    assert timeline["alone_after"] < 1.0, f"instances on their share {timeline['alone_after']:.2f}s after the kill"
    assert timeline["shared_after"] < 2.0, f"shared again {timeline['shared_after']:.2f}s after Redis returned"
    outage = fleet_rate(events, killed + 1.0, restarted)
    shares = [fleet_rate(e, killed + 1.0, restarted) for e in per_instance]
    after = fleet_rate(events, restarted + SPAN, end)
    each = ", ".join(f"{s / QUOTA:.2f}" for s in shares)
    print(f"\nFLEET failover: outage {outage / QUOTA:.2f} Q (instances {each}), "
          f"after Redis returned {after / QUOTA:.2f} Q; alone after {timeline['alone_after']:.2f}s, shared again "
          f"after {timeline['shared_after']:.2f}s")
    assert abs(outage - QUOTA) <= 0.25 * QUOTA, f"during the outage the fleet got {outage / QUOTA:.2f} x Q"
    assert all(s <= 0.5 * QUOTA for s in shares), f"an instance beyond its share: {[s / QUOTA for s in shares]}"
    assert abs(after - QUOTA) <= 0.20 * QUOTA, f"after Redis returned the fleet got {after / QUOTA:.2f} x Q"
