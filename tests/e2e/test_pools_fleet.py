"""Issue 21 across instances: the issue's pool through two `kqp run` sharing a real redis-server.

helpers.fleet_path: two kqp processes, the same config (the issue's pool, cluster scope, sync every
100 ms) in front of one upstream tap and a one-broker mock cluster; job-a-1 produces through the
first, job-b-1 through the second, flat out. The budget is the fleet's: together they get at most
1.08 x 300 kB/s, split 3:1 within 8 points, judged on the upstream tap from three spans after the
later first request (the first exchange finds each instance alone with the whole budget: Kafka's
first burst, twice). No client errs or times out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.fleet_path import SPAN, fleet_rate, open_fleet, run_all
from helpers.quota_path import quota_upstream
from helpers.redis_server import needs_redis, redis_server
from upstreams.launch import Upstream

from e2e.test_pools import BUDGET, ISSUE, delivered, job
from e2e.test_quota_producers import fresh_topic

pytestmark = [pytest.mark.e2e, needs_redis]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with quota_upstream(tmp_path_factory.mktemp("pools-fleet")) as bootstrap:
        yield bootstrap


def test_two_instances_split_one_budget_3_to_1(kqp: Any, upstream: Upstream, tmp_path: Path) -> None:
    topics = [fresh_topic(upstream, "pool-fleet") for _ in range(2)]
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(redis_server(tmp_path / "redis.log")).url
        quotas = {**ISSUE, "scope": "cluster", "cluster": {"redis_url": url, "expected_instances": 2,
                                                            "sync_interval_ms": 100, "timeout_ms": 250}}
        fleet = open_fleet(stack, kqp, upstream, 2, quotas)
        runs = run_all([job(k.bootstrap, t, cid, 16.0)
                        for k, t, cid in zip(fleet.kqps, topics, ("job-a-1", "job-b-1"), strict=True)])
        a_events, b_events = fleet.produce_events(["job-a-1"]), fleet.produce_events(["job-b-1"])
        assert a_events and b_events, "a producer reached no upstream"
        start = max(a_events[0][0], b_events[0][0]) + 3 * SPAN
        end = min(run.offered_until for run in runs)
        assert end - start >= 4.0, f"offer too short to judge: {end - start:.1f}s"
        a, b = fleet_rate(a_events, start, end), fleet_rate(b_events, start, end)
        print(f"\nPOOL across instances: {(a + b) / BUDGET:.3f} x budget, job-a-1 {a / (a + b):.3f} of it "
              f"({a / 1000:.1f} + {b / 1000:.1f} kB/s over {end - start:.1f}s)")
        assert a + b <= 1.08 * BUDGET, f"together {(a + b) / 1000:.1f} kB/s for a fleet budget of 300 kB/s"
        assert abs(a / (a + b) - 0.75) <= 0.08, f"job-a-1 took {a / (a + b):.3f} of the pool, weight 3 of 4"
    delivered(upstream, topics, runs)
