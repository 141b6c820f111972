"""The fleet exchange over Redis: one Lua script call per sync interval, whatever the number of sensors.

A script rather than a pipeline because the exchange is read-modify-read: add this instance's
deltas, prune old windows, then read the totals, atomically, in one round trip, with the store's own
clock (`TIME`), which every instance then uses as the fleet clock. It does exactly what
`kqp.quotas.fleet_store.FleetStore.exchange` does in memory (a test runs both on the same requests).

Keys (all under one hash tag, so a Redis Cluster would place them in one slot):

    {prefix}:instances           sorted set: instance -> last exchange (ms); expires with live_ms
    {prefix}:epoch               the store's epoch: set once by the first instance; a Redis that
                                 lost its data (restarted without persistence) gets a new one, and
                                 the instances send their usage of the last span again
    {prefix}:w{window_ms}:{name} hash per sensor: window index -> the fleet's usage in it, and
                                 "@instance" -> when that instance last added to it (ms); expires
                                 ttl_ms after the last write

The client is redis-py's asyncio client: `redis://`, `rediss://` (TLS) and `unix://` URLs as
redis-py reads them, a password from the URL or from `quotas.cluster.password_env`, and Sentinel
(`redis+sentinel://`) through redis-py's `Sentinel.master_for`, which asks the sentinels for the
current master on every new connection and so follows a failover. redis-py's own retries are off:
an exchange that fails is simply the next interval's to retry, and the driver's timeout bounds it.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from kqp.config.fleet_section import RedisTarget
from kqp.quotas.fleet import SensorTotals, SensorUsage, SyncReply, SyncRequest

CHUNK = 256   # sensors per script run

# KEYS: instances, epoch, then one hash per sensor.
# ARGV: instance, epoch proposal, window_ms, keep_windows, live_ms, active_ms, ttl_ms,
#       then per sensor: the number of deltas n, and n (window, delta) pairs.
# Returns: epoch, seconds, microseconds, instances present, then per sensor: others active, and a
# flat list window, total, window, total... (totals as strings: Lua numbers would be truncated).
EXCHANGE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local instance = ARGV[1]
local window_ms, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
local live, active, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
redis.call('SET', KEYS[2], ARGV[2], 'NX')
local epoch = redis.call('GET', KEYS[2])
redis.call('ZADD', KEYS[1], now, instance)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - live - 1)
redis.call('PEXPIRE', KEYS[1], live)
local out = {epoch, t[1], t[2], redis.call('ZCARD', KEYS[1])}
local first = math.floor(now / window_ms) - keep
local me = '@' .. instance
local a = 8
for i = 3, #KEYS do
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


def redis_client(target: RedisTarget, password: str | None, timeout: float) -> aioredis.Redis:
    """redis-py's asyncio client for `target`, every socket operation bounded by `timeout`."""
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout,
                               "retry": Retry(NoBackoff(), 0)}
    if target.sentinels:
        sentinel = Sentinel(list(target.sentinels), sentinel_kwargs={"socket_timeout": timeout,
                                                                     "socket_connect_timeout": timeout},
                            **options)
        return sentinel.master_for(target.service, db=target.db, username=target.username,
                                   password=target.password or password, ssl=target.ssl)
    if password is not None:
        options["password"] = password   # a password in the URL still wins: redis-py reads the URL last
    return aioredis.from_url(target.url, **options)


class RedisExchange:
    """`FleetBackend` on Redis: `exchange` is one EVALSHA (EVAL again after a Redis restart)."""

    kind = "redis"

    def __init__(self, target: RedisTarget, password: str | None, prefix: str, timeout: float) -> None:
        self.name = target.shown
        self._client = redis_client(target, password, timeout)
        self._script = self._client.register_script(EXCHANGE_LUA)
        self._prefix = "{" + prefix + "}"

    def keys(self, request: SyncRequest) -> list[str]:
        p = self._prefix
        return [f"{p}:instances", f"{p}:epoch", *(f"{p}:w{request.window_ms}:{s.name}" for s in request.sensors)]

    async def exchange(self, request: SyncRequest) -> SyncReply:
        """One round trip: the script once per chunk of sensors, the chunks in one pipeline.

        Redis runs one script at a time and nothing else meanwhile; chunks keep each run short
        (about CHUNK x 10-20 us) however many entities are active, so other instances' exchanges
        are not held behind one long script.
        """
        head: list[str | int] = [request.instance, request.epoch, request.window_ms, request.keep_windows,
                                 request.live_ms, request.active_ms, request.ttl_ms]
        keys = self.keys(request)
        sensors = request.sensors
        if len(sensors) <= CHUNK:
            return parse_reply(await self._script(keys=keys, args=head + _deltas(sensors)))
        async with self._client.pipeline(transaction=False) as pipe:
            for start in range(0, len(sensors), CHUNK):
                chunk = sensors[start:start + CHUNK]
                await self._script(keys=keys[:2] + keys[2 + start:2 + start + CHUNK], args=head + _deltas(chunk),
                                   client=pipe)
            replies = [parse_reply(raw) for raw in await pipe.execute()]
        last = replies[-1]
        return SyncReply(last.epoch, last.now, last.instances, tuple(s for r in replies for s in r.sensors))

    async def close(self) -> None:
        await self._client.aclose()


def _deltas(sensors: tuple[SensorUsage, ...]) -> list[str | int]:
    args: list[str | int] = []
    for sensor in sensors:
        args.append(len(sensor.deltas))
        for window, delta in sensor.deltas:
            args += (window, repr(delta))
    return args


def parse_reply(raw: list[Any]) -> SyncReply:
    epoch, seconds, micros, present = raw[:4]
    sensors: list[SensorTotals] = []
    for i in range(4, len(raw), 2):
        flat = raw[i + 1]
        windows = {int(flat[k]): float(flat[k + 1]) for k in range(0, len(flat), 2)}
        sensors.append(SensorTotals(windows, int(raw[i])))
    return SyncReply(_text(epoch), int(seconds) + int(micros) / 1e6, int(present), tuple(sensors))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
