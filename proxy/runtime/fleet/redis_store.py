"""The fleet exchange over Redis: one Lua script call per sync interval, whatever the number of sensors.

A script rather than a pipeline because the exchange is read-modify-read: add this instance's
deltas, prune old windows, then read the totals, atomically, in one round trip, with the store's own
clock (`TIME`) as the fleet clock. It does exactly what `kqp.quotas.fleet.store.FleetStore.exchange`
does in memory (a test runs both on the same requests). Keys share the hash tag `{prefix}`:
`{prefix}:instances`, `{prefix}:epoch` (set once; a Redis that lost its data gets a new one and
every instance resends its span) and a hash per sensor, `{prefix}:w{window_ms}:{name}`.

The client is redis-py's asyncio client: `redis://`, `rediss://`, `unix://`, a password from the URL
or `password_env`, Sentinel through `Sentinel.master_for` and Redis Cluster through `RedisCluster`,
both of which follow a failover. redis-py's own retries are off: a failed exchange is the next
interval's to retry, within the driver's deadline. fleet/redis_cluster.py runs this script per
slot group.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError
from redis.utils import str_if_bytes

from kqp.config.fleet_section import RedisTarget
from kqp.proxy.runtime.fleet.adaptive_redis import ADAPTIVE_LUA, AdaptiveRedis, joined
from kqp.proxy.runtime.fleet.adaptive_redis import parse_reply as parse_adaptive
from kqp.quotas.fleet.ledger import SensorTotals, SensorUsage, SyncReply, SyncRequest
from kqp.quotas.pools.adaptive_fleet import AdaptiveReply, AdaptiveRequest

CHUNK = 256   # sensors per script run

# KEYS: epoch, the instances registry (if ARGV[8] is 1), then one hash per sensor.
# ARGV: instance, epoch proposal, window_ms, keep_windows, live_ms, active_ms, ttl_ms, registry (1/0),
#       then per sensor: the number of deltas n, and n (window, delta) pairs.
# Returns: epoch, seconds, microseconds, instances present (0 without the registry), then per
# sensor: others active, and a flat list window, total, window, total... (totals as strings: Lua
# numbers would be truncated).
EXCHANGE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local instance = ARGV[1]
local window_ms, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
local live, active, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
redis.call('SET', KEYS[1], ARGV[2], 'NX')
local epoch = redis.call('GET', KEYS[1])
local present, k = 0, 2
if ARGV[8] == '1' then
  redis.call('ZADD', KEYS[2], now, instance)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - live - 1)
  redis.call('PEXPIRE', KEYS[2], live)
  present, k = redis.call('ZCARD', KEYS[2]), 3
end
local out = {epoch, t[1], t[2], present}
local first = math.floor(now / window_ms) - keep
local me = '@' .. instance
local a = 9
for i = k, #KEYS do
  local key = KEYS[i]
  local n = tonumber(ARGV[a])
  a = a + 1
  if n > 0 then
    for _ = 1, n do
      redis.call('HINCRBYFLOAT', key, ARGV[a], ARGV[a + 1])
      a = a + 2
    end
    redis.call('HSET', key, me, now)
    redis.call('PEXPIRE', key, ttl)
  end
  local flat = redis.call('HGETALL', key)
  local windows, others = {}, 0
  for k = 1, #flat, 2 do
    local field, value = flat[k], flat[k + 1]
    if string.sub(field, 1, 1) == '@' then
      if now - tonumber(value) > active then
        redis.call('HDEL', key, field)
      elseif field ~= me then
        others = others + 1
      end
    elseif tonumber(field) < first then
      redis.call('HDEL', key, field)
    else
      windows[#windows + 1] = field
      windows[#windows + 1] = value
    end
  end
  out[#out + 1] = others
  out[#out + 1] = windows
end
return out
"""


def redis_client(target: RedisTarget, password: str | None, timeout: float) -> aioredis.Redis | RedisCluster:
    """redis-py's asyncio client for `target`, every socket operation bounded by `timeout`."""
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout,
                               "retry": Retry(NoBackoff(), 0)}
    if target.cluster_nodes:
        # One node's URL carries the credentials, TLS and options; the others are more nodes to ask
        # for the slot map. Those configured are kept as the nodes to ask (not replaced by the
        # addresses the cluster announces), so a Service name outlives pods that change addresses.
        (host, port), *more = target.cluster_nodes
        auth = "" if target.username is None and target.password is None else \
            f"{quote(target.username or '', safe='')}:{quote(target.password or '', safe='')}@"
        query = f"?{target.query}" if target.query else ""
        url = f"{'rediss' if target.ssl else 'redis'}://{auth}{_netloc(host, port)}/0{query}"
        if password is not None and target.password is None:
            options["password"] = password
        return RedisCluster.from_url(url, startup_nodes=[ClusterNode(h, p) for h, p in more],
                                     dynamic_startup_nodes=False, **options)
    if target.sentinels:
        sentinel = Sentinel(list(target.sentinels), sentinel_kwargs={"socket_timeout": timeout,
                                                                     "socket_connect_timeout": timeout},
                            **options)
        return sentinel.master_for(target.service, db=target.db, username=target.username,
                                   password=target.password or password, ssl=target.ssl)
    if password is not None:
        options["password"] = password   # a password in the URL still wins: redis-py reads the URL last
    return aioredis.from_url(target.url, **options)


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class RedisExchange:
    """`FleetBackend` on one Redis (or a Sentinel group's master): every key under `{prefix}`, every
    script call of an exchange (the usage's, and the adaptive pools' when asked) in one pipeline."""

    kind = "redis"

    def __init__(self, target: RedisTarget, password: str | None, prefix: str, timeout: float) -> None:
        self.name = target.shown
        self._client = redis_client(target, password, timeout)
        self._script = self._client.register_script(EXCHANGE_LUA)
        self._tag = "{" + prefix + "}"
        self.adaptive = AdaptiveRedis(self._client, prefix)

    async def exchange(self, request: SyncRequest, deadline: float, adaptive: AdaptiveRequest | None = None
                       ) -> tuple[SyncReply, AdaptiveReply | BaseException | None]:
        """One round trip: the usage script once per chunk of sensors, and the adaptive pools' script,
        each an EVALSHA in one pipeline (redis-py's pipelined scripts would ask SCRIPT EXISTS first: a
        second round trip); the scripts are loaded and the pipeline sent again once if Redis has lost
        them. The adaptive part may fail alone (its error is returned); the usage part's failure raises.

        Redis runs one script at a time and nothing else meanwhile; chunks keep each run short
        (about CHUNK x 10-20 us) however many entities are active, so other instances' exchanges
        are not held behind one long script.
        """
        sensors = request.sensors
        adaptive_calls = [] if adaptive is None else self.adaptive.calls(adaptive)
        scripts = ((self._script, EXCHANGE_LUA), (self.adaptive, ADAPTIVE_LUA))
        async with asyncio.timeout_at(deadline):
            for attempt in range(2):
                async with self._client.pipeline(transaction=False) as pipe:
                    for start in range(0, max(len(sensors), 1), CHUNK):
                        keys, args = script_call(self._tag, request, sensors[start:start + CHUNK], registry=True)
                        pipe.evalsha(self._script.sha, len(keys), *keys, *args)
                    usage_calls = len(pipe.command_stack)
                    for keys, args in adaptive_calls:
                        pipe.evalsha(self.adaptive.sha, len(keys), *keys, *args)
                    raw = await pipe.execute(raise_on_error=False)
                if attempt or not any(isinstance(r, NoScriptError) for r in raw):
                    break
                for script, text in scripts:   # a restarted Redis: load both, send again
                    assert await self._client.script_load(text) == script.sha
        usage, answers = raw[:usage_calls], raw[usage_calls:]
        if failed := next((r for r in usage if isinstance(r, Exception)), None):
            raise failed
        reply = combined([parse_reply(r) for r in usage])
        if adaptive is None:
            return reply, None
        return reply, next((r for r in answers if isinstance(r, Exception)), None) or joined(
            [parse_adaptive(r) for r in answers])

    async def close(self) -> None:
        await self._client.aclose()


def combined(replies: list[SyncReply]) -> SyncReply:
    """The chunks' answers as one: the last one's clock and instances, every sensor in order."""
    last = replies[-1]
    return SyncReply(last.epoch, last.now, last.instances, tuple(s for r in replies for s in r.sensors))


def script_call(tag: str, request: SyncRequest, sensors: tuple[SensorUsage, ...],
                registry: bool) -> tuple[list[str], list[str | int]]:
    """KEYS and ARGV of one script run over `sensors`, all of whose keys are under `tag`."""
    keys = [f"{tag}:epoch", *([f"{tag}:instances"] if registry else []),
            *(f"{tag}:w{request.window_ms}:{s.name}" for s in sensors)]
    args: list[str | int] = [request.instance, request.epoch, request.window_ms, request.keep_windows,
                             request.live_ms, request.active_ms, request.ttl_ms, 1 if registry else 0]
    for sensor in sensors:
        args.append(len(sensor.deltas))
        for window, delta in sensor.deltas:
            args += (window, repr(delta))
    return keys, args


def parse_reply(raw: list[Any], sensor_epochs: bool = False) -> SyncReply:
    """The script's answer; with `sensor_epochs` each sensor's totals carry the epoch (a Redis
    Cluster's slot groups have one each)."""
    epoch, seconds, micros, present = raw[:4]
    text = str_if_bytes(epoch)
    own = text if sensor_epochs else None
    sensors: list[SensorTotals] = []
    for i in range(4, len(raw), 2):
        flat = raw[i + 1]
        windows = {int(flat[k]): float(flat[k + 1]) for k in range(0, len(flat), 2)}
        sensors.append(SensorTotals(windows, int(raw[i]), own))
    return SyncReply(text, int(seconds) + int(micros) / 1e6, int(present), tuple(sensors))

