"""The fleet's adaptive budgets in Redis: one Lua script call per sync interval for all of them.

`kqp.quotas.pools.adaptive_fleet` says what the processes exchange and why; its `AdaptiveStore` is the
specification, and this script does the same, step for step (a test runs both on the same
requests): take a proposal if it starts from the `applied` the store holds (compare-and-set), keep
the reports of windows not folded in yet, and answer with the state and the reports of the closed
windows, sorted by window then instance so every process folds the same floats in the same order.
The clock is Redis `TIME`, as in the usage exchange.

Each budget is one hash, `{prefix:adaptive:budget}:w{window_ms}` ("applied", "state", and
"r:{window}:{instance}" reports), under a hash tag of its own so that on a Redis Cluster budgets
spread over the masters (`budget` is "pool:quota type", %-quoted so no brace ends the tag). On one
Redis every budget goes in one call, pipelined with the usage exchange; on a Cluster, one call per
budget, all at once. Connection handling is fleet/redis_store.py's.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from redis.utils import str_if_bytes

from kqp.quotas.pools.adaptive_fleet import AdaptiveReply, AdaptiveRequest, BudgetView

# KEYS: one hash per budget. ARGV: instance, window_ms, grace_windows, keep_windows, then per budget:
# proposal after ("" for none), proposal applied, proposal state, the number of reports n, and n
# (window, report) pairs. Returns: seconds, microseconds, then per budget: applied, state (or nil),
# and a flat list window, instance, report, ... of the closed windows after applied.
ADAPTIVE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local instance = ARGV[1]
local window_ms, grace, keep = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local current = math.floor(now / window_ms)
local oldest, last_closed = current - keep, current - grace
local out = {t[1], t[2]}
local a = 5
for i = 1, #KEYS do
  local key = KEYS[i]
  local applied = tonumber(redis.call('HGET', key, 'applied') or '-1')
  if ARGV[a] ~= '' then
    local proposed = tonumber(ARGV[a + 1])
    if tonumber(ARGV[a]) == applied and proposed > applied then
      redis.call('HSET', key, 'applied', proposed, 'state', ARGV[a + 2])
      applied = proposed
    end
  end
  local n = tonumber(ARGV[a + 3])
  a = a + 4
  for _ = 1, n do
    if tonumber(ARGV[a]) > applied then
      redis.call('HSET', key, 'r:' .. ARGV[a] .. ':' .. instance, ARGV[a + 1])
    end
    a = a + 2
  end
  local flat = redis.call('HGETALL', key)
  local closed = {}
  for k = 1, #flat, 2 do
    local field = flat[k]
    if string.sub(field, 1, 2) == 'r:' then
      local colon = string.find(field, ':', 3, true)
      local w = tonumber(string.sub(field, 3, colon - 1))
      if w <= applied or w < oldest then
        redis.call('HDEL', key, field)
      elseif w <= last_closed then
        closed[#closed + 1] = w
        closed[#closed + 1] = string.sub(field, colon + 1)
        closed[#closed + 1] = flat[k + 1]
      end
    end
  end
  redis.call('PEXPIRE', key, 4 * keep * window_ms)
  out[#out + 1] = applied
  out[#out + 1] = redis.call('HGET', key, 'state')
  out[#out + 1] = closed
end
return out
"""


class AdaptiveRedis:
    """The adaptive exchange on a redis-py client (fleet_redis.redis_client builds one); `per_budget`
    (a Redis Cluster): one script call per budget, each under its own hash tag."""

    def __init__(self, client: Any, prefix: str, per_budget: bool = False) -> None:
        self._script = client.register_script(ADAPTIVE_LUA)
        self._prefix = prefix
        self._per_budget = per_budget

    def key(self, window_ms: int, budget: str) -> str:
        return "{" + f"{self._prefix}:adaptive:{quote(budget, safe=':')}" + "}" + f":w{window_ms}"

    def keys(self, request: AdaptiveRequest) -> list[str]:
        return [self.key(request.window_ms, b.name) for b in request.budgets]

    def calls(self, request: AdaptiveRequest) -> list[tuple[list[str], list[str | int]]]:
        """KEYS and ARGV of each script call the exchange takes (one, or one per budget)."""
        head: list[str | int] = [request.instance, request.window_ms, request.grace_windows, request.keep_windows]
        groups = [(b,) for b in request.budgets] if self._per_budget else [request.budgets]
        calls = []
        for budgets in groups:
            args = list(head)
            for budget in budgets:
                p = budget.proposal
                args += ("", 0, "") if p is None else (p.after, p.applied, p.state)
                args.append(len(budget.reports))
                for window, report in budget.reports:
                    args += (window, report)
            calls.append(([self.key(request.window_ms, b.name) for b in budgets], args))
        return calls

    async def exchange(self, request: AdaptiveRequest) -> AdaptiveReply:
        replies = await asyncio.gather(*(self._script(keys=keys, args=args) for keys, args in self.calls(request)))
        return joined([parse_reply(raw) for raw in replies])

    @property
    def sha(self) -> str:
        return self._script.sha


def joined(replies: list[AdaptiveReply]) -> AdaptiveReply:
    """Several calls' answers as one, the budgets in the order they were asked (the first call's clock)."""
    return AdaptiveReply(replies[0].now, tuple(view for reply in replies for view in reply.budgets))


def parse_reply(raw: list[Any]) -> AdaptiveReply:
    views: list[BudgetView] = []
    for i in range(2, len(raw), 3):
        flat = raw[i + 2]
        triples = sorted((int(flat[k]), str_if_bytes(flat[k + 1]), str_if_bytes(flat[k + 2]))
                         for k in range(0, len(flat), 3))
        closed: dict[int, list[str]] = {}
        for window, _instance, report in triples:
            closed.setdefault(window, []).append(report)
        state = raw[i + 1]
        views.append(BudgetView(int(raw[i]), None if state is None else str_if_bytes(state),
                                {w: tuple(reports) for w, reports in closed.items()}))
    return AdaptiveReply(int(raw[0]) + int(raw[1]) / 1e6, tuple(views))

