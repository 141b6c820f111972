"""The fleet exchange over a Redis Cluster: the sensors spread over slot groups, one call per group.

A Lua script may only touch keys of one slot, and one slot lives on one master, so a single hash
tag would put every entity on one node. Sensors are hashed (crc32 of the name) into `GROUPS` slot
groups, each under a hash tag of its own, and fleet/redis_store.py's script runs once per group with
sensors (per chunk of CHUNK), all groups at once. Group 0, the home group, is `{prefix}` itself: it
alone keeps the instance registry and its node's `TIME` is the fleet clock; the other groups read
their own node's `TIME` only to prune what the same node wrote, so NTP agreement is enough. Each
group has its own epoch, as a shard can lose its data alone. Adaptive budgets run beside the groups
(`exchange`'s adaptive request, fleet/adaptive_redis.py). A shard down fails its groups' calls: the process goes alone,
and what the other groups applied counts as sent (`ExchangeIncomplete`).

Group g's tag is `{prefix#g.n}`, n the first number putting its slot into the g-th of GROUPS - 1
equal slot ranges, so `redis-cli --cluster create`'s even ranges give each master its share.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from kqp.config.fleet_section import RedisTarget
from kqp.proxy.runtime.fleet.adaptive_redis import AdaptiveRedis
from kqp.proxy.runtime.fleet.redis_store import CHUNK, EXCHANGE_LUA, parse_reply, redis_client, script_call
from kqp.quotas.fleet.ledger import ExchangeIncomplete, SensorTotals, SyncReply, SyncRequest
from kqp.quotas.pools.adaptive_fleet import AdaptiveReply, AdaptiveRequest

GROUPS = 16   # a layout constant: every process of a fleet must agree on it


def group_tags(prefix: str, groups: int = GROUPS) -> tuple[str, ...]:
    """Each slot group's hash tag: `{prefix}` (the home group), then tags on evenly spread slots."""
    tags = ["{" + prefix + "}"]
    spread = groups - 1   # the home group's slot is wherever `{prefix}` falls; the others share the space
    for g in range(1, groups):
        low, high = (g - 1) * REDIS_CLUSTER_HASH_SLOTS // spread, g * REDIS_CLUSTER_HASH_SLOTS // spread
        # A tag lands in a range of 1/spread of the slots with that probability: 10,000 tries
        # leave no realistic chance of finding none.
        tag = next((t for n in range(10_000)
                    if low <= key_slot((t := f"{prefix}#{g}.{n}").encode()) < high), None)
        assert tag is not None, f"no tag for slot group {g}"
        tags.append("{" + tag + "}")
    return tuple(tags)


def group_of(name: str, groups: int = GROUPS) -> int:
    return zlib.crc32(name.encode()) % groups


@dataclass(frozen=True, slots=True, eq=False)   # compared and hashed by identity: a dict key
class _Call:
    indices: tuple[int, ...]   # the request's sensors in this call, by position
    keys: list[str]
    args: list[str | int]


class RedisClusterExchange:
    """`FleetBackend` on a Redis Cluster: one script call per slot group (and chunk), all at once."""

    kind = "redis"

    def __init__(self, target: RedisTarget, password: str | None, prefix: str, timeout: float) -> None:
        self.name = target.shown
        self._client = redis_client(target, password, timeout)
        self._script = self._client.register_script(EXCHANGE_LUA)
        self._tags = group_tags(prefix)
        self.adaptive = AdaptiveRedis(self._client, prefix, per_budget=True)

    def calls(self, request: SyncRequest) -> list[list[_Call]]:
        """Per slot group with sensors, its script calls; the home group's first, always there."""
        members: dict[int, list[int]] = {0: []}
        for i, sensor in enumerate(request.sensors):
            members.setdefault(group_of(sensor.name), []).append(i)
        plan: list[list[_Call]] = []
        for group, indices in members.items():
            calls = []
            for start in range(0, max(len(indices), 1), CHUNK):
                part = tuple(indices[start:start + CHUNK])
                keys, args = script_call(self._tags[group], request, tuple(request.sensors[i] for i in part),
                                         registry=group == 0)
                calls.append(_Call(part, keys, args))
            plan.append(calls)
        return plan

    async def exchange(self, request: SyncRequest, deadline: float, adaptive: AdaptiveRequest | None = None
                       ) -> tuple[SyncReply, AdaptiveReply | BaseException | None]:
        """Every group's calls at once, each group's chunks one after the other (a few connections
        per master, not one per chunk), and beside them the adaptive pools' calls (one per pool
        budget, each in its own slot); whatever has not answered by `deadline` has failed. The
        adaptive part may fail alone (its error is returned)."""
        # The slot map first, alone: redis-py's lazy one, on the first call, races when several
        # calls start at once (some fail with "connection closed"). A no-op once known; after a
        # connection error redis-py forgets it, and the next exchange reads it again here.
        async with asyncio.timeout_at(deadline):
            await self._client.initialize()
        task = None if adaptive is None else asyncio.ensure_future(self._adaptive(adaptive, deadline))
        try:
            reply = await self._usage(request, deadline)
        except BaseException:
            if task is not None:
                task.cancel()
                task.add_done_callback(_retrieve)
            raise
        if task is None:
            return reply, None
        try:
            return reply, await task
        except Exception as exc:   # the adaptive pools go alone; the usage merges
            return reply, exc

    async def _usage(self, request: SyncRequest, deadline: float) -> SyncReply:
        plan = self.calls(request)
        answers: dict[_Call, SyncReply] = {}
        tasks = [asyncio.ensure_future(self._run_group(calls, answers)) for calls in plan]
        try:
            done, _ = await asyncio.wait(tasks, timeout=max(0.0, deadline - asyncio.get_running_loop().time()))
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
                    task.add_done_callback(_retrieve)
        errors = [TimeoutError() if task not in done else task.exception() for task in tasks]
        return _assemble(request, plan, answers, [e for e in errors if e is not None])

    async def _adaptive(self, adaptive: AdaptiveRequest, deadline: float) -> AdaptiveReply:
        async with asyncio.timeout_at(deadline):
            return await self.adaptive.exchange(adaptive)

    async def _run_group(self, calls: list[_Call], answers: dict[_Call, SyncReply]) -> None:
        for call in calls:
            answers[call] = parse_reply(await self._script(keys=call.keys, args=call.args), sensor_epochs=True)

    async def close(self) -> None:
        await self._client.aclose()


def _assemble(request: SyncRequest, plan: list[list[_Call]], answers: dict[_Call, SyncReply],
              errors: list[BaseException]) -> SyncReply:
    sensors: list[SensorTotals | None] = [None] * len(request.sensors)
    for call, reply in answers.items():
        for i, totals in zip(call.indices, reply.sensors, strict=True):
            sensors[i] = totals
    if not errors:
        home = answers[plan[0][0]]
        return SyncReply(home.epoch, home.now, home.instances, tuple(sensors))  # type: ignore[arg-type]  # all set
    first = errors[0]
    if not answers:
        raise first
    failed = sum(1 for calls in plan if any(call not in answers for call in calls))
    cause = "timed out" if isinstance(first, TimeoutError) else f"{type(first).__name__}: {first}"
    raise ExchangeIncomplete(tuple(sensors), f"{failed} of {len(plan)} slot groups did not answer ({cause})")


def _retrieve(task: asyncio.Future[None]) -> None:
    # A group call cancelled at the deadline may still end in an error of its own: read it, so
    # asyncio does not log it as never retrieved.
    if not task.cancelled():
        task.exception()
