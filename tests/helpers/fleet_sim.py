"""A fleet of kqp processes on a simulated clock: the quota managers and the exchange, nothing else.

N processes each have one producer that offers without limit: it sends a request of
`request_bytes` as soon as it is not muted, and is muted for the throttle its request earned
(KIP-219: the response goes back at once, one round trip `rtt` later the client may send again).
Every process exchanges with one `FleetStore` each `sync_interval`, staggered, and an exchange takes
`exchange_seconds` (the reply reflects the store when the request arrives, and is merged on return).
With `sync_interval=None` the processes share nothing: Kafka's per-broker semantics.

What reached the upstream is returned as (time, bytes) events, for the same rate judgements the
end-to-end tests make on the wire (helpers.quota_analysis). Used by tests/quotas/test_quota_fleet_sim.py
and to measure the error bound quotas/README.md states ("The fleet ledger").
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from kqp.quotas.fleet import FleetLedger
from kqp.quotas.fleet_store import FleetStore
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import SAMPLED, EntitySpec, Principal, QuotaSettings

PRINCIPAL = Principal("ANONYMOUS", "fleet-job")


@dataclass(frozen=True)
class FleetRun:
    events: list[tuple[float, int]]       # (time, bytes) of every request admitted upstream
    span: float


def simulate(processes: int, quota: float, seconds: float, *, sync_interval: float | None,
             request_bytes: int = 16384, window_size: float = 0.2, window_count: int = 11,
             rtt: float = 0.002, exchange_seconds: float = 0.001, start_spread: float = 0.0,
             down: tuple[float, float] | None = None, algorithm: str = SAMPLED) -> FleetRun:
    """Run the fleet for `seconds`; `down=(from, to)`: every exchange in that interval fails."""
    settings = QuotaSettings(window_size, window_count,
                             {EntitySpec(None, PRINCIPAL.client_id): {"producer_byte_rate": quota}},
                             algorithm=algorithm)
    store = FleetStore()
    managers: list[QuotaManager] = []
    for i in range(processes):
        ledger = None if sync_interval is None else FleetLedger(
            f"p{i}", f"e{i}", window_size, window_count, processes, sync_interval)
        managers.append(QuotaManager(settings, 0.0, ledger))
    queue: list[tuple[float, int, str, int]] = []   # (time, order, kind, process)
    order = 0

    def push(at: float, kind: str, index: int) -> None:
        nonlocal order
        order += 1
        heapq.heappush(queue, (at, order, kind, index))

    for i in range(processes):
        push(start_spread * i / max(1, processes - 1), "send", i)
        if sync_interval is not None:
            push(sync_interval * i / processes, "sync", i)
    events: list[tuple[float, int]] = []
    while queue:
        now, _, kind, i = heapq.heappop(queue)
        if now > seconds:
            break
        m = managers[i]
        if kind == "send":
            violations = m.record_produce(PRINCIPAL, request_bytes, 1, 1, now)
            events.append((now, request_bytes))
            delay = max((v.throttle_seconds for v in violations), default=0.0)
            push(now + rtt + delay, "send", i)
        elif kind == "sync":
            assert sync_interval is not None
            exchange(m, store, now, exchange_seconds, down)
            push(now + sync_interval, "sync", i)
    return FleetRun(events, window_size * window_count)


def exchange(m: QuotaManager, store: FleetStore, now: float, exchange_seconds: float,
             down: tuple[float, float] | None) -> None:
    """One process's exchange with the store at `now`, taking `exchange_seconds`; fails while `down`."""
    assert m.fleet is not None
    request = m.fleet.collect(now)
    if down is not None and down[0] <= now < down[1]:
        m.fleet.failed(request)
    else:
        reply = store.exchange(request, now + exchange_seconds / 2)
        m.fleet.merge(request, reply, now, now + exchange_seconds)


def rate(events: list[tuple[float, int]], start: float, end: float) -> float:
    """Bytes per second admitted in [start, end)."""
    return sum(n for at, n in events if start <= at < end) / (end - start)


def worst_span(events: list[tuple[float, int]], span: float, start: float, end: float) -> float:
    """The most bytes per second any `span`-long interval starting in [start, end - span] held."""
    ordered = sorted(events)
    best = 0.0
    high = 0
    running = 0
    for low, (at, _) in enumerate(ordered):
        while high < len(ordered) and ordered[high][0] < at + span:
            running += ordered[high][1]
            high += 1
        if start <= at <= end - span:
            best = max(best, running / span)
        running -= ordered[low][1]
    return best
