"""Adaptive pools through the fleet driver: one law per pool budget for the fleet, on the real stores.

Two "processes" (each a FleetLedger, a QuotaManager with issue 22's adaptive pool, and a FleetSync)
share one store: a real redis-server, a real Redis Cluster (three masters, three replicas), or the
`--workers` parent's socket. Each closes its windows on the wall clock as a live kqp does (charges
of its member, answers at 20 ms), exchanges every 100 ms, and the two must end up holding one budget
that the law moved (slow start from the floor), never each finding its own. On one Redis the usage
and adaptive scripts go in one pipeline of EVALSHAs (no SCRIPT EXISTS round trip), and a Redis that
lost its scripts gets them again; a store that cannot be reached leaves each process's law running
alone on its own windows.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import redis
from helpers.redis_cluster import RedisClusterNodes, needs_redis_cluster
from helpers.redis_server import needs_redis, redis_server
from redis.crc import key_slot

from kqp.config import quota_settings_from
from kqp.config.fleet_section import redis_target
from kqp.proxy.runtime.fleet.local import WorkersExchange, WorkersExchangeServer
from kqp.proxy.runtime.fleet.redis_cluster import RedisClusterExchange
from kqp.proxy.runtime.fleet.redis_store import RedisExchange
from kqp.proxy.runtime.fleet.sync import FleetBackend, FleetSync
from kqp.quotas.fleet.ledger import FleetLedger
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import Principal, QuotaType
from kqp.quotas.pools.adaptive import AdaptivePool

pytestmark = needs_redis
W = 0.2
QUOTAS = {"window_size_seconds": W, "entities": [{"client_id_prefix": "job-a-"}, {"client_id_prefix": "job-b-"}],
          "pools": [{"name": "ingest", "producer_byte_rate": 10_000_000, "members": [{"client_id_prefix": "job-"}],
                     "adaptive": {"target_latency_ms": 100}}]}
FLOOR = 100_000.0


class Process:
    """One kqp process's quota side and fleet driver."""

    def __init__(self, name: str, backend: FleetBackend) -> None:
        now = time.monotonic()
        self.ledger = FleetLedger(name, f"epoch-{name}", W, 11, 2, 0.1, clock_offset=time.time() - now)
        self.quotas = QuotaManager(quota_settings_from(QUOTAS), now, self.ledger)
        self.sync = FleetSync(self.ledger, backend, 0.1, 5.0, time.monotonic)
        self.sync.adaptive_pools = lambda: self.quotas.pools.adaptive.values()
        self.member = Principal("ANONYMOUS", f"job-{name}-1")

    @property
    def pool(self) -> AdaptivePool:
        return self.quotas.pools.adaptive[("ingest", QuotaType.PRODUCER_BYTE_RATE)]

    def traffic(self) -> None:
        """A member flat out (a request over its quota now and then) and five answers at 20 ms."""
        now = time.monotonic()
        self.quotas.record_produce(self.member, 100_000, 1, 1, now)
        for _ in range(5):
            self.pool.observe(now, 1, 0.020, (20_000, 1, 1, 1), 0)


async def run(processes: list[Process], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p in processes:
            p.traffic()
            assert await p.sync.sync_once(), p.sync.last_error
        await asyncio.sleep(0.1)


async def settle(processes: list[Process]) -> None:
    """Exchanges without new windows of traffic until both hold the fleet's state: at least three
    rounds, and more while a window closed between the two processes' last exchanges (windows end
    on the wall clock, traffic or not, and a busy machine stretches a round across a boundary)."""
    for round_ in range(20):
        for p in processes:
            assert await p.sync.sync_once(), p.sync.last_error
        if round_ >= 2 and len({p.pool.fleet.applied for p in processes if p.pool.fleet is not None}) == 1:
            return


@contextlib.asynccontextmanager
async def two(make: Callable[[], FleetBackend]) -> AsyncIterator[list[Process]]:
    processes = [Process("a", make()), Process("b", make())]
    try:
        yield processes
    finally:
        for p in processes:
            await p.sync.backend.close()


def assert_one_budget(processes: list[Process]) -> None:
    a, b = (p.pool for p in processes)
    assert a.fleet is not None and b.fleet is not None and a.fleet.shared and b.fleet.shared
    assert a.law.budget > 2 * FLOOR, "the law never ran: the budget is still at its floor"
    assert a.fleet.applied == b.fleet.applied and a.law.budget == b.law.budget
    assert [p.quotas.pools.ledgers[("ingest", QuotaType.PRODUCER_BYTE_RATE)].budget for p in processes] == \
        [a.law.budget, b.law.budget]


@pytest.mark.parametrize("layout", ["redis", pytest.param("cluster", marks=needs_redis_cluster)])
async def test_two_processes_hold_one_budget_through_redis(tmp_path: Path, layout: str) -> None:
    with contextlib.ExitStack() as stack:
        cluster = None
        if layout == "redis":
            url = stack.enter_context(redis_server(tmp_path / "redis.log")).url
        else:
            cluster = stack.enter_context(RedisClusterNodes(tmp_path / "cluster"))
            url = cluster.url
        target = redis_target(url)
        kind = RedisClusterExchange if target.cluster_nodes else RedisExchange
        async with two(lambda: kind(target, None, "t", 5.0)) as processes:
            await run(processes, 2.0)
            await settle(processes)
            assert_one_budget(processes)
            key = processes[0].sync.backend.adaptive.key(200, "ingest:producer_byte_rate")   # type: ignore[attr-defined]
            assert key == "{t:adaptive:ingest:producer_byte_rate}:w200"
            if cluster is not None:   # the budget's one key, in the slot of its own hash tag, on its master
                assert key_slot(key.encode()) == key_slot(b"t:adaptive:ingest:producer_byte_rate")
                with redis.Redis(port=cluster.master_of(key).port) as node:
                    assert node.exists(key)


async def test_one_redis_one_round_trip_and_scripts_loaded_again(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis.log") as server:
        target = redis_target(server.url)
        async with two(lambda: RedisExchange(target, None, "t", 5.0)) as processes:
            await run(processes, 0.6)
            plain = redis.Redis.from_url(server.url)
            try:
                stats = plain.info("commandstats")
                assert "cmdstat_script|exists" not in stats and "cmdstat_script" not in stats
                plain.script_flush()   # as a restarted Redis would have it
                await run(processes, 0.6)
                assert plain.info("commandstats")["cmdstat_script|load"]["calls"] >= 2
            finally:
                plain.close()
            await settle(processes)
            assert_one_budget(processes)


async def test_the_workers_parent_runs_one_law() -> None:
    server = WorkersExchangeServer()
    server.serve()
    try:
        async with two(lambda: WorkersExchange(server.path)) as processes:
            await run(processes, 2.0)
            await settle(processes)
            assert_one_budget(processes)
    finally:
        server.close()


async def test_a_store_out_of_reach_leaves_each_law_running_alone() -> None:
    # A port nobody listens on: every exchange fails at once.
    target = redis_target("redis://127.0.0.1:1")
    async with two(lambda: RedisExchange(target, None, "t", 0.2)) as processes:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            for p in processes:
                p.traffic()
                assert not await p.sync.sync_once()
            await asyncio.sleep(0.1)
        for p in processes:
            assert p.pool.fleet is not None and not p.pool.fleet.shared
            assert p.pool.law.budget > 2 * FLOOR   # the law ran here, on this process's own windows
