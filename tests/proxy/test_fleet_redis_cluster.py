"""The fleet exchange on a real Redis Cluster (three masters, three replicas, from Debian's redis-server).

- the slot groups' hash tags sit on evenly spread slots: each of three even masters holds 5 or 6;
- a master killed: the exchange fails at once (the process goes alone), what the other masters
  took is not sent again, and once a replica has taken over every sensor holds each delta once;
- a master that lost its data (FLUSHALL): only its slot groups get a new epoch, and only their
  usage is sent again;
- the registry and clock (the home group) follow their master to its replica.
The answers themselves are compared with `FleetStore`'s in test_fleet_exchange.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
from helpers.net import LOOPBACK
from helpers.redis_cluster import RedisClusterNodes, needs_redis_cluster
from helpers.redis_server import self_signed
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from kqp.config.fleet_section import redis_target
from kqp.proxy.runtime.fleet.redis_cluster import GROUPS, RedisClusterExchange, group_of, group_tags
from kqp.proxy.runtime.fleet.sync import FleetSync
from kqp.quotas.fleet.ledger import FleetLedger

PREFIX = "t"
# One sensor per slot group, so that every master holds some.
SPREAD = [next(n for k in range(1000) if group_of(n := f"request_rate::g{k}") == g) for g in range(GROUPS)]
TAGS = group_tags(PREFIX)


def ledger(name: str, expected: int = 2) -> FleetLedger:
    # Windows of 1 s x 11: the store keeps 13 s of them, longer than a failover takes here.
    return FleetLedger(name, f"epoch-{name}", 1.0, 11, expected, 0.1, clock_offset=time.time() - time.monotonic())


def fleet_sync(cluster: RedisClusterNodes, name: str) -> FleetSync:
    # 2 s: the first exchange reads the slot map and the command table, and the machine may be busy.
    backend = RedisClusterExchange(redis_target(cluster.url), None, PREFIX, 2.0)
    return FleetSync(ledger(name), backend, 0.1, 2.0, time.monotonic)


def record_all(sync: FleetSync, value: float) -> None:
    now = time.monotonic()
    for name in SPREAD:
        sync.ledger.usage_for(name, now).record(value, now)


async def others(sync: FleetSync) -> list[float]:
    """What `sync` reads of the others' usage per slot group's sensor, after an exchange."""
    for name in SPREAD:
        sync.ledger.usage_for(name, time.monotonic())
    await until(sync)
    return [sum(sync.ledger.usages[name].others.values()) for name in SPREAD]


@contextlib.asynccontextmanager
async def two_processes(cluster: RedisClusterNodes) -> AsyncIterator[tuple[FleetSync, FleetSync]]:
    a, b = fleet_sync(cluster, "a"), fleet_sync(cluster, "b")
    try:
        yield a, b
    finally:
        await a.backend.close()
        await b.backend.close()


def groups_on(cluster: RedisClusterNodes, port: int) -> list[int]:
    """The slot groups whose tag the master on `port` serves now."""
    return [g for g, tag in enumerate(TAGS) if cluster.master_of(tag).port == port]


async def until(sync: FleetSync, within: float = 10.0) -> None:
    """Exchange until one succeeds (a client may first meet a connection the failover closed)."""
    deadline = time.monotonic() + within
    while not await sync.sync_once():
        assert time.monotonic() < deadline, sync.last_error
        await asyncio.sleep(0.1)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisClusterNodes]:
    # Without full coverage the masters still up keep serving while a dead one's replica takes
    # over, so an exchange in between is answered in part (with it, every node says CLUSTERDOWN).
    with RedisClusterNodes(tmp_path, extra_args=["--cluster-require-full-coverage", "no"]) as nodes:
        yield nodes


def test_slot_groups_spread_evenly_over_the_masters() -> None:
    assert TAGS[0] == "{t}"   # the home group: the keys one Redis has
    slots = [key_slot(tag.encode()) for tag in TAGS[1:]]
    ranges = [g * REDIS_CLUSTER_HASH_SLOTS // (GROUPS - 1) for g in range(GROUPS)]
    assert all(low <= slot < high for slot, low, high in zip(slots, ranges[:-1], ranges[1:], strict=True))
    # redis-cli gives three masters 0-5460, 5461-10922 and 10923-16383: 5 groups each, and one
    # of them the home group.
    per_master = [sum(1 for s in [key_slot(t.encode()) for t in TAGS] if low <= s <= high)
                  for low, high in ((0, 5460), (5461, 10922), (10923, 16383))]
    assert sorted(per_master) == [5, 5, 6]
    # The layout is part of the wire format between a fleet's processes: processes placing an entity
    # in different groups would not share it. Pinned, so that a change to it is a deliberate one.
    assert group_tags("kqp")[:4] == ("{kqp}", "{kqp#1.10}", "{kqp#2.11}", "{kqp#3.23}")
    assert group_of("producer_byte_rate:ANONYMOUS:spark-orders-etl") == 7


@needs_redis_cluster
async def test_a_master_killed_nothing_is_counted_twice_or_lost(cluster: RedisClusterNodes) -> None:
    async with two_processes(cluster) as (a, b):
        await until(b)
        record_all(a, 1.0)
        await until(a)
        cluster.wait_replicated()
        victim = cluster.master_of(TAGS[1])   # not the home group's master: the registry answers
        lost = groups_on(cluster, victim.port)
        victim.kill()
        record_all(a, 1.0)
        assert not await a.sync_once()
        assert not a.ledger.shared and a.ledger.scale == pytest.approx(1 / 2)
        assert a.last_error is not None and f"{len(lost)} of {GROUPS} slot groups did not answer" in a.last_error
        # The groups that answered hold the second 1.0 already; only the lost groups' is pending.
        assert [bool(a.ledger.usages[name].pending) for name in SPREAD] == [g in lost for g in range(GROUPS)]
        cluster.wait_healed(victim)
        await until(a)
        assert await others(b) == [2.0] * GROUPS, "each delta once, in every slot group"
        assert a.ledger.shared and b.ledger.instances == 2


@needs_redis_cluster
async def test_a_master_that_lost_its_data_gets_its_groups_usage_again(cluster: RedisClusterNodes) -> None:
    async with two_processes(cluster) as (a, b):
        record_all(a, 5.0)
        await until(a)
        victim = cluster.master_of(TAGS[1])
        lost = groups_on(cluster, victim.port)
        with redis.Redis(host=LOOPBACK, port=victim.port, socket_timeout=2) as client:
            client.flushall()   # as a shard restarted empty: its groups' epochs are gone too
        assert await others(b) == [0.0 if g in lost else 5.0 for g in range(GROUPS)]
        await until(a)   # a sees new epochs in the lost groups: their usage goes again, the rest not
        assert [bool(a.ledger.usages[name].pending) for name in SPREAD] == [g in lost for g in range(GROUPS)]
        await until(a)
        assert await others(b) == [5.0] * GROUPS


@needs_redis_cluster
async def test_the_registry_and_clock_follow_the_home_master_to_its_replica(cluster: RedisClusterNodes) -> None:
    async with two_processes(cluster) as (a, b):
        await until(a)
        await until(b)
        assert b.ledger.instances == 2
        cluster.wait_replicated()
        home = cluster.master_of(TAGS[0])
        home.kill()
        assert not await a.sync_once()   # the home group is down: no clock, no count
        cluster.wait_healed(home)
        await until(a)
        await until(b)
        assert a.ledger.shared and b.ledger.instances == 2
        assert abs(a.ledger.offset - (time.time() - time.monotonic())) < 0.5   # the replica's TIME


# The ACL deploy/k8s/fleet/redis-cluster/README.md gives kqp's user, for key_prefix "t": the keys of every slot group,
# the script and the commands it runs, and what redis-py's cluster client reads the slot map with.
KQP_ACL = ("on >kqp-pw resetkeys ~{t}:* ~{t#*}:* resetchannels -@all +evalsha +script|load +time +set +get "
           "+zadd +zremrangebyscore +zcard +pexpire +hincrbyfloat +hset +hgetall +hdel +cluster|slots +command")


@needs_redis_cluster
async def test_a_user_limited_by_the_documented_acl(cluster: RedisClusterNodes) -> None:
    narrow = KQP_ACL.replace(" ~{t#*}:*", "").replace(">kqp-pw", ">narrow-pw")   # the home group's keys only
    for node in cluster.nodes:   # ACLs are per node in a Redis Cluster: every node, replicas too
        with redis.Redis(host=LOOPBACK, port=node.port, socket_timeout=2) as client:
            client.execute_command("ACL", "SETUSER", "kqp", *KQP_ACL.split())
            client.execute_command("ACL", "SETUSER", "narrow", *narrow.split())
    url = cluster.url.replace("redis+cluster://", "redis+cluster://kqp@")
    allowed = FleetSync(ledger("a"), RedisClusterExchange(redis_target(url), "kqp-pw", PREFIX, 2.0), 0.1, 2.0,
                        time.monotonic)
    url = cluster.url.replace("redis+cluster://", "redis+cluster://narrow:narrow-pw@")
    refused = FleetSync(ledger("b"), RedisClusterExchange(redis_target(url), None, PREFIX, 2.0), 0.1, 2.0,
                        time.monotonic)
    try:
        for sync in (allowed, refused):
            record_all(sync, 1.0)
        await until(allowed)   # the password from password_env, the user from the URL
        assert not await refused.sync_once()
        assert refused.last_error is not None and "NoPermission" in refused.last_error, refused.last_error
    finally:
        await allowed.backend.close()
        await refused.backend.close()


@needs_redis_cluster
async def test_tls_reaches_every_node(tmp_path: Path) -> None:
    # rediss+cluster:// with the CA in the URL's query (as rediss:// takes it): TLS to every node the
    # slot map names, not only to the one in the URL. Plain text to the same nodes fails cleanly.
    cert = self_signed(tmp_path)
    with RedisClusterNodes(tmp_path / "cluster", tls_cert=cert) as nodes:
        assert nodes.url.startswith("rediss+cluster://")
        plain_url = nodes.url.replace("rediss+cluster://", "redis+cluster://").split("?")[0]
        tls, plain = (FleetSync(ledger(name), RedisClusterExchange(redis_target(url), None, PREFIX, 5.0), 0.1, 5.0,
                                time.monotonic) for name, url in (("a", nodes.url), ("b", plain_url)))
        try:
            record_all(tls, 1.0)
            await until(tls)
            assert tls.ledger.shared and tls.sensors == GROUPS   # one sensor in each slot group
            assert not await plain.sync_once() and not plain.ledger.shared
        finally:
            await tls.backend.close()
            await plain.backend.close()
