"""The fleet exchange's backends and driver against a real redis-server (never a fake) and real sockets.

- the Lua script does what `FleetStore` does, answer for answer, on the same requests, on one Redis
  and spread over the slot groups of a real Redis Cluster (three masters, three replicas);
- a password works (in the URL, or handed over from `password_env`), a wrong one fails cleanly;
- TLS (`rediss://`, with a password) works, and plain text to a TLS port fails cleanly;
- Redis unreachable, or accepting and never answering: the exchange gives up within its timeout,
  the ledger goes alone at once, the outage is logged once, and it comes back when Redis does;
- a Redis that restarts empty is noticed (a new epoch) and the usage of the span is sent again;
- Sentinel: the master is found through a sentinel (redis-py's `Sentinel.master_for`);
- the `--workers` parent's Unix-socket exchange serves several workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers.net import LOOPBACK, free_port
from helpers.redis_cluster import RedisClusterNodes, needs_redis_cluster
from helpers.redis_server import RedisServer, needs_redis, redis_server, self_signed

from kqp.config.fleet_section import redis_target
from kqp.proxy.runtime.fleet.local import WorkersExchange, WorkersExchangeServer
from kqp.proxy.runtime.fleet.redis_cluster import GROUPS, RedisClusterExchange, group_of
from kqp.proxy.runtime.fleet.redis_store import CHUNK, RedisExchange
from kqp.proxy.runtime.fleet.sync import FleetSync
from kqp.quotas.fleet.ledger import FleetLedger, SyncReply, SyncRequest
from kqp.quotas.fleet.store import FleetStore
from kqp.quotas.pools.adaptive_fleet import AdaptiveRequest

pytestmark = needs_redis
TIMEOUT = 0.25


def ledger(name: str, expected: int = 1, interval: float = 0.1, window: float = 0.2) -> FleetLedger:
    # Windows of 0.2 s x 11 around the wall clock, as a live kqp's would be.
    return FleetLedger(name, f"epoch-{name}", window, 11, expected, interval,
                       clock_offset=time.time() - time.monotonic())


def redis_exchange(url: str, password: str | None = None, prefix: str = "t",
                   timeout: float = TIMEOUT) -> RedisExchange | RedisClusterExchange:
    target = redis_target(url)
    return (RedisClusterExchange if target.cluster_nodes else RedisExchange)(target, password, prefix, timeout)


def soon(seconds: float = 5.0) -> float:
    """A deadline for one exchange, on the event loop's clock."""
    return asyncio.get_running_loop().time() + seconds


@contextlib.asynccontextmanager
async def store_backend(layout: str, tmp_path: Path) -> AsyncIterator[RedisExchange | RedisClusterExchange]:
    """The backend for one Redis or for a Redis Cluster of three masters and three replicas."""
    with contextlib.ExitStack() as stack:
        if layout == "redis":
            url = stack.enter_context(redis_server(tmp_path / "redis.log")).url
        else:
            url = stack.enter_context(RedisClusterNodes(tmp_path / "cluster")).url
        # A cluster's first exchange reads the slot map and the command table: more than TIMEOUT.
        backend = redis_exchange(url, timeout=5.0)
        try:
            yield backend
        finally:
            await backend.close()


def as_one_store(reply: SyncReply) -> SyncReply:
    """A cluster's answer without the epoch each slot group gives its sensors: what one store says."""
    return dataclasses.replace(reply, sensors=tuple(dataclasses.replace(s, epoch=None) for s in reply.sensors))


LAYOUTS = [pytest.param("redis"), pytest.param("cluster", marks=needs_redis_cluster)]


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_the_script_answers_as_the_store_does(tmp_path: Path, layout: str) -> None:
    async with store_backend(layout, tmp_path) as backend:
        store = FleetStore()
        epochs: dict[str, str | None] = {}
        ledgers = [ledger(n) for n in "abc"]
        # A sensor in every slot group of a cluster's layout (on one Redis, just more sensors).
        spread = [next(n for k in range(1000) if group_of(n := f"request_rate::g{k}") == g) for g in range(GROUPS)]
        for step in range(12):
            for i, fleet in enumerate(ledgers):
                now = time.monotonic()
                for sensor in ("producer_byte_rate::job", f"request_rate::job-{i}", "request_rate:u%3Ax:", *spread):
                    if (step + i) % 3:
                        fleet.usage_for(sensor, now).record(1000.5 * (i + 1) + step, now)
                request = fleet.collect(now)
                reply, _ = await backend.exchange(request, soon())
                expected = store.exchange(request, reply.now)
                assert as_one_store(reply) == expected, f"step {step}, instance {i}"
                for item, totals in zip(request.sensors, reply.sensors, strict=True):
                    # one epoch per slot group, taken by the first request to reach it, kept since
                    assert epochs.setdefault(item.name, totals.epoch) == totals.epoch
                fleet.merge(request, reply, now, time.monotonic())
            await asyncio.sleep(0.03)
        assert ledgers[0].instances == 3
        assert ledgers[0].usages["producer_byte_rate::job"].others_active == 2
        if layout == "cluster":   # each sensor carries its slot group's epoch
            assert None not in epochs.values()


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_many_sensors_go_in_chunks_and_answer_alike(tmp_path: Path, layout: str) -> None:
    # More sensors than one script run takes (CHUNK, and on a cluster in one slot group too):
    # several runs, one answer.
    count = 2 * CHUNK + 7 if layout == "redis" else 20 * CHUNK
    async with store_backend(layout, tmp_path) as backend:
        store = FleetStore()
        for name in "ab":
            # A 1 s interval keeps an instance present for 10 s: a's exchange of thousands of sensors
            # can take about a second on a busy machine, and the spec counts presence in float
            # seconds where the script counts whole milliseconds; at the edge of live_ms they differ.
            # Windows of 1 s likewise keep a's usage (13 s) and activity (11 s) in every slot group's
            # answer: each group's script reads TIME when it runs, seconds after the home group's on
            # a loaded cluster, and with 0.2 s windows a's usage had aged out of the last groups.
            fleet = ledger(name, interval=1.0, window=1.0)
            now = time.monotonic()
            for i in range(count):
                fleet.usage_for(f"request_rate::c{i}", now).record(i + 0.25, now)
            request = fleet.collect(now)
            reply, _ = await backend.exchange(request, soon())
            assert as_one_store(reply) == store.exchange(request, reply.now)
            assert len(reply.sensors) == count
        assert reply.sensors[-1].windows and reply.sensors[-1].others_active == 1


async def test_a_password_in_the_url_or_from_the_environment(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis.log", password="s3cret") as server:
        for backend in (redis_exchange(server.url),
                        redis_exchange(f"redis://{LOOPBACK}:{server.port}/0", password="s3cret")):
            sync = FleetSync(ledger("a"), backend, 0.1, TIMEOUT, time.monotonic)
            assert await sync.sync_once(), sync.last_error
            await backend.close()
        wrong = redis_exchange(f"redis://:nope@{LOOPBACK}:{server.port}/0")
        sync = FleetSync(ledger("a"), wrong, 0.1, TIMEOUT, time.monotonic)
        assert not await sync.sync_once()
        assert sync.last_error is not None and "Authentication" in sync.last_error
        await wrong.close()


async def test_tls_with_a_password(tmp_path: Path) -> None:
    # rediss:// with the server's CA given in the URL's query, as redis-py reads it.
    cert = self_signed(tmp_path)
    with redis_server(tmp_path / "redis.log", password="pw", tls_cert=cert) as server:
        assert server.url.startswith("rediss://:pw@")
        # A TLS handshake on a loaded 2-core machine can take longer than TIMEOUT's 0.25 s.
        backend = redis_exchange(server.url, timeout=2.0)
        sync = FleetSync(ledger("a"), backend, 0.1, 2.0, time.monotonic)
        try:
            assert await sync.sync_once(), sync.last_error
        finally:
            await backend.close()
        plain = redis_exchange(f"redis://:pw@{LOOPBACK}:{server.port}/0")   # no TLS: refused
        sync = FleetSync(ledger("a"), plain, 0.1, TIMEOUT, time.monotonic)
        assert not await sync.sync_once()
        await plain.close()


async def test_unreachable_redis_goes_alone_at_once_logs_once_and_rejoins(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    server = RedisServer(tmp_path / "redis.log")   # not started yet: nothing listens on its port
    fleet = ledger("a", expected=3)
    backend = redis_exchange(server.url)
    sync = FleetSync(fleet, backend, 0.1, TIMEOUT, time.monotonic)
    caplog.set_level(logging.INFO, logger="kqp.fleet")
    try:
        for _ in range(3):
            started = time.monotonic()
            assert not await sync.sync_once()
            assert time.monotonic() - started < TIMEOUT + 0.2
        assert not fleet.shared and fleet.scale == pytest.approx(1 / 3)
        assert sync.status().errors == 3 and not sync.status().up
        assert "unreachable" in sync.describe() and "1/3" in sync.describe()
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        server.start()
        assert await sync.sync_once(), sync.last_error
        assert fleet.shared and fleet.scale == 1.0
        assert "answers again" in caplog.records[-1].getMessage()
        assert sync.describe().startswith("quotas shared by 1 instance(s) through redis://")
    finally:
        await backend.close()
        server.stop()


async def test_a_process_that_stopped_exchanging_says_how_old_its_view_is(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    # A starved event loop: no exchange fails, none runs. Quota checks find the view stale
    # (quotas/fleet/ledger.py) and hold each quota at the process's share until the next exchange.
    shift = [0.0]

    def clock() -> float:
        return time.monotonic() + shift[0]

    with redis_server(tmp_path / "redis.log") as server:
        fleet = ledger("a", expected=3)
        backend = redis_exchange(server.url)
        sync = FleetSync(fleet, backend, 0.1, TIMEOUT, clock)
        caplog.set_level(logging.INFO, logger="kqp.fleet")
        try:
            assert await sync.sync_once()
            shift[0] = 1.0                         # the loop ran nothing for a second
            fleet.check(clock())
            assert not fleet.shared and not sync.status().up
            assert sync.describe().startswith(f"quotas not shared: the last exchange with {backend.name} is 1.0s old")
            assert await sync.sync_once() and fleet.shared
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING]   # nothing failed
        finally:
            await backend.close()


async def test_a_redis_that_never_answers_costs_one_timeout(tmp_path: Path) -> None:
    # A listener that accepts and then says nothing: a hung Redis, or a black-holed network path.
    silent = socket.socket()
    silent.bind((LOOPBACK, 0))
    silent.listen(8)
    backend = redis_exchange(f"redis://{LOOPBACK}:{silent.getsockname()[1]}/0")
    fleet = ledger("a")
    fleet.usage_for("s", time.monotonic()).record(5, time.monotonic())
    sync = FleetSync(fleet, backend, 0.1, TIMEOUT, time.monotonic)
    try:
        started = time.monotonic()
        assert not await sync.sync_once()
        assert TIMEOUT - 0.05 <= time.monotonic() - started < TIMEOUT + 0.2
        assert "timed out" in (sync.last_error or "") or "Timeout" in (sync.last_error or "")
        assert fleet.usages["s"].pending, "the usage of a failed exchange is kept for the next one"
    finally:
        await backend.close()
        silent.close()


async def test_run_stops_between_exchanges_as_soon_as_asked(tmp_path: Path) -> None:
    # A minute between exchanges: `stop` ends the pause at once instead of waiting it out.
    with redis_server(tmp_path / "redis.log") as server:
        backend, exchanged, stop = redis_exchange(server.url), asyncio.Event(), asyncio.Event()
        real_exchange = backend.exchange

        async def exchange(request: SyncRequest, deadline: float,   # the real one, then a signal
                           adaptive: AdaptiveRequest | None = None) -> tuple[SyncReply, None]:
            reply, _ = await real_exchange(request, deadline)
            exchanged.set()
            return reply, None

        backend.exchange = exchange   # type: ignore[method-assign]
        sync = FleetSync(ledger("a"), backend, 60.0, TIMEOUT, time.monotonic)
        task = asyncio.create_task(sync.run(stop))
        async with asyncio.timeout(5):
            await exchanged.wait()
            stop.set()
            await task
        assert sync.syncs == 1 and sync.status().up


async def test_a_redis_restarted_empty_gets_the_usage_again(tmp_path: Path) -> None:
    port = free_port()
    a, b = ledger("a"), ledger("b")
    name = "producer_byte_rate::job"
    first = RedisServer(tmp_path / "redis.log", port=port).start()
    second = RedisServer(tmp_path / "redis.log", port=port)
    backend = redis_exchange(first.url)
    try:
        now = time.monotonic()
        a.usage_for(name, now).record(700, now)
        request = a.collect(now)
        a.merge(request, (await backend.exchange(request, soon()))[0], now, time.monotonic())
        first.kill()
        second.start()   # the same port, nothing kept
        for fleet in (a, a, b):   # a sees a new epoch, then sends its 700 again; b reads them
            now = time.monotonic()
            fleet.usage_for(name, now)
            sync = FleetSync(fleet, backend, 0.1, TIMEOUT, time.monotonic)
            if not await sync.sync_once():   # the first call after the restart may meet the dead connection
                assert await sync.sync_once(), sync.last_error
        assert sum(b.usages[name].others.values()) == pytest.approx(700)
    finally:
        await backend.close()
        second.stop()


async def test_sentinel_finds_the_master(tmp_path: Path) -> None:
    with redis_server(tmp_path / "master.log") as master:
        port = free_port()
        conf = tmp_path / "sentinel.conf"   # the sentinel rewrites its config file: a fresh one per test
        conf.write_text(f"port {port}\nbind {LOOPBACK}\nsentinel monitor fleet {LOOPBACK} {master.port} 1\n")
        sentinel = RedisServer(tmp_path / "sentinel.log", port=port, sentinel_config=conf).start()
        backend = redis_exchange(f"redis+sentinel://{LOOPBACK}:{port}/fleet")
        try:
            sync = FleetSync(ledger("a"), backend, 0.1, 2.0, time.monotonic)
            deadline = time.monotonic() + 10
            while not await sync.sync_once():   # until the sentinel has checked its master
                assert time.monotonic() < deadline, sync.last_error
                await asyncio.sleep(0.2)
            assert sync.ledger.instances == 1
        finally:
            await backend.close()
            sentinel.stop()


async def test_the_workers_parent_serves_the_exchange() -> None:
    server = WorkersExchangeServer()
    server.serve()
    workers = [WorkersExchange(server.path) for _ in range(2)]
    ledgers = [ledger("w0", expected=2), ledger("w1", expected=2)]
    try:
        for fleet in ledgers:
            fleet.usage_for("request_rate::x", time.monotonic()).record(3, time.monotonic())
        for _ in range(2):
            for fleet, backend in zip(ledgers, workers, strict=True):
                sync = FleetSync(fleet, backend, 0.1, TIMEOUT, time.monotonic)
                assert await sync.sync_once(), sync.last_error
        assert [f.instances for f in ledgers] == [2, 2]
        assert sum(ledgers[0].usages["request_rate::x"].others.values()) == 3
    finally:
        for backend in workers:
            await backend.close()
        server.close()
    # The parent gone: the next exchange fails, it does not hang.
    sync = FleetSync(ledgers[0], WorkersExchange(server.path), 0.1, TIMEOUT, time.monotonic)
    assert not await sync.sync_once()
