"""The fleet's adaptive exchange in Redis: the Lua script answers as `AdaptiveStore` does.

A real redis-server (never a fake); three `FleetBudget` replicas close their windows on the wall
clock (Redis `TIME` is the fleet's clock, as in the usage exchange) and exchange every 50 ms. Every
request goes to Redis and to the in-memory store, which must give the same answer; the replicas
follow Redis's answers and end up holding one budget.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

from helpers.redis_server import needs_redis, redis_server

from kqp.config.fleet_section import redis_target
from kqp.proxy.runtime.fleet.adaptive_redis import AdaptiveRedis
from kqp.proxy.runtime.fleet.redis_store import redis_client
from kqp.quotas.pools.adaptive_fleet import (
    AdaptiveRequest,
    AdaptiveStore,
    BudgetExchange,
    FleetBudget,
    Proposal,
    Report,
)
from kqp.quotas.pools.adaptive_law import AdaptiveBudget
from kqp.quotas.pools.upstream_signals import LatencyHistogram, WindowSignals

pytestmark = needs_redis
W, GRACE, KEEP = 0.2, 2, 20


def report(latency: float, delivered: float) -> Report:
    h = LatencyHistogram()
    for _ in range(5):
        h.record(latency)
    return Report(WindowSignals(W, {1: h}, delivered * W), math.inf)


async def test_the_script_answers_as_the_store_does_and_the_fleet_agrees(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis.log") as server:
        client = redis_client(redis_target(server.url), None, 1.0)
        backend = AdaptiveRedis(client, "t")
        store = AdaptiveStore()
        replicas = [FleetBudget("ingest:producer_byte_rate", AdaptiveBudget(10e6, 1e5, 0.1, time.time()), W,
                                grace_windows=GRACE, keep_windows=KEEP) for _ in range(3)]
        closed = [math.floor(time.time() / W) - 1] * 3
        try:
            deadline = time.time() + 3.0
            step = 0

            async def exchange_round(ended: int | None) -> None:
                for i, replica in enumerate(replicas):
                    last = math.floor(time.time() / W) - 1 if ended is None else ended
                    while closed[i] < last:
                        closed[i] += 1   # slow for the first second, healthy after
                        replica.close_window(closed[i], report(0.3 if step < 20 else 0.02, 100_000 * (i + 1)))
                    request = AdaptiveRequest(f"p{i}", 200, GRACE, KEEP, (replica.collect(),))
                    reply = await backend.exchange(request)
                    assert reply == store.exchange(request, reply.now), f"step {step}, instance {i}"
                    replica.merge(reply.budgets[0], reply.now, 3)

            while time.time() < deadline:
                await exchange_round(None)
                step += 1
                await asyncio.sleep(0.05)
            # A window may close between one replica's last exchange and the next one's: bring all
            # three to the same closed window, then let each hear what the others stored.
            for _ in range(2):
                await exchange_round(max(closed))
            applied = {r.applied for r in replicas}
            assert len(applied) == 1 and applied.pop() > closed[0] - GRACE - 2
            assert len({r.budget for r in replicas}) == 1
            # A proposal that does not start from the stored state is refused by both.
            stale = AdaptiveRequest("p9", 200, GRACE, KEEP, (BudgetExchange(
                "ingest:producer_byte_rate", (), Proposal(-1, closed[0] + 50, '{"budget": 1}')),))
            reply = await backend.exchange(stale)
            assert reply == store.exchange(stale, reply.now)
            assert reply.budgets[0].state != '{"budget": 1}'
        finally:
            await client.aclose()
