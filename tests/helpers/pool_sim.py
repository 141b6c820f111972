"""Producers in a capacity pool on a simulated clock: quota managers (one per kqp process), nothing else.

Each producer has a client id, a kqp process, an offered rate (None: without limit) and a time span
in which it offers. It sends a request of `request_bytes` when its offer allows and it is not muted,
and is muted for the throttle the request earned (KIP-219: one round trip `rtt` later it may send
again). With `every`, it is a micro-batch job instead: `batch_bytes` become due every `every`
seconds from its start and go out as fast as the quota lets them (`PoolRun.batches`: when each
was due and when its last byte went). With `sync_interval`, the processes exchange usage with one `FleetStore` as
helpers.fleet_sim's do (staggered; `down=(from, to)`: every exchange then fails).

Returns what reached the upstream as (time, bytes) per client id, for the same judgements the
end-to-end tests make on the wire. Used by tests/quotas/test_pool_sim.py.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from kqp.quotas.fleet.ledger import FleetLedger
from kqp.quotas.fleet.store import FleetStore
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import Principal, QuotaSettings

from .fleet_sim import exchange


@dataclass(frozen=True)
class Offer:
    client_id: str
    process: int = 0
    rate: float | None = None        # bytes/s offered; None: as fast as the quota lets it
    start: float = 0.0
    stop: float = math.inf
    user: str = "ANONYMOUS"
    every: float | None = None       # a micro-batch of `batch_bytes` due every this many seconds
    batch_bytes: int = 0


@dataclass
class PoolRun:
    events: dict[str, list[tuple[float, int]]]
    managers: list[QuotaManager]
    trace: list[tuple[float, dict[str, float]]] = field(default_factory=list)   # (time, member -> quota)
    batches: dict[str, list[tuple[float, float]]] = field(default_factory=dict)   # (due, sent) per micro-batch

    def rate(self, client_ids: list[str] | str, start: float, end: float) -> float:
        ids = [client_ids] if isinstance(client_ids, str) else client_ids
        return sum(n for cid in ids for at, n in self.events[cid] if start <= at < end) / (end - start)


def simulate(settings: QuotaSettings, offers: list[Offer], seconds: float, *, sync_interval: float | None = None,
             request_bytes: int = 16384, rtt: float = 0.002, exchange_seconds: float = 0.001,
             down: tuple[float, float] | None = None, trace_every: float | None = None) -> PoolRun:
    processes = 1 + max(o.process for o in offers)
    store = FleetStore()
    managers = []
    for i in range(processes):
        ledger = None if sync_interval is None else FleetLedger(
            f"p{i}", f"e{i}", settings.window_size_seconds, settings.window_count, processes, sync_interval)
        managers.append(QuotaManager(settings, 0.0, ledger))
    queue: list[tuple[float, int, str, int]] = []
    order = 0

    def push(at: float, kind: str, index: int) -> None:
        nonlocal order
        order += 1
        heapq.heappush(queue, (at, order, kind, index))

    backlog = [0] * len(offers)
    due: list[list[float]] = [[] for _ in offers]
    for i, offer in enumerate(offers):
        push(offer.start, "due" if offer.every else "send", i)
    if sync_interval is not None:
        for i in range(processes):
            push(sync_interval * i / processes, "sync", i)
    if trace_every:
        push(0.0, "trace", 0)
    run = PoolRun({o.client_id: [] for o in offers}, managers)
    while queue:
        now, _, kind, i = heapq.heappop(queue)
        if now > seconds:
            break
        if kind == "due":
            offer = offers[i]
            if now < offer.stop:
                if not backlog[i]:
                    push(now, "send", i)
                backlog[i] += offer.batch_bytes
                due[i].append(now)
                push(now + offer.every, "due", i)   # type: ignore[operator]
        elif kind == "send":
            offer = offers[i]
            if now >= offer.stop:
                continue
            size = request_bytes if offer.every is None else min(request_bytes, backlog[i])
            if size <= 0:
                continue
            m = managers[offer.process]
            violations = m.record_produce(Principal(offer.user, offer.client_id), size, 1, 1, now)
            run.events[offer.client_id].append((now, size))
            delay = max((v.throttle_seconds for v in violations), default=0.0)
            if offer.every is not None:
                backlog[i] -= size
                if not backlog[i]:
                    run.batches.setdefault(offer.client_id, []).extend((at, now) for at in due[i])
                    due[i].clear()
                    continue
            pace = 0.0 if offer.rate is None else size / offer.rate
            push(now + max(rtt + delay, pace), "send", i)
        elif kind == "sync":
            assert sync_interval is not None
            exchange(managers[i], store, now, exchange_seconds, down)
            push(now + sync_interval, "sync", i)
        else:
            quotas = {}
            for m in managers:
                for ledger in m.pools.ledgers.values():
                    for key, member in ledger.members.items():
                        quotas[key.client_id_prefix or key.client_id] = member.quota
            run.trace.append((now, quotas))
            push(now + trace_every, "trace", 0)   # type: ignore[operator]
    return run
