"""A fleet of kqp processes on a simulated clock: the quota managers and the exchange, nothing else.

N processes each have one producer that offers without limit: it sends a request of
`request_bytes` as soon as it is not muted, and is muted for the throttle its request earned
(KIP-219: the response goes back at once, one round trip `rtt` later the client may send again).
Every process exchanges with one `FleetStore` each `sync_interval`, staggered, and an exchange takes
`exchange_seconds` (the reply reflects the store when the request arrives, and is merged on return).
With `sync_interval=None` the processes share nothing: Kafka's per-broker semantics.

A starved process is modelled by `stalls`: while one lasts, its event loop runs nothing (its clients'
requests, its exchange task, the merge of a reply that has arrived) and everything due meanwhile runs
when it ends, in order, as a loop that gets the CPU back does. A reply merged later than `timeout`
after its request was sent fails instead, although the store applied it (the driver's
`asyncio.timeout` fires first). `starts` lets clients begin at different times (a late joiner).

What reached the upstream is returned as (time, bytes) events, for the same rate judgements the
end-to-end tests make on the wire (helpers.quota_analysis). Used by tests/quotas/test_quota_fleet_sim.py
and to measure the error bound quotas/README.md states ("The fleet ledger").
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass

from kqp.quotas.fleet.ledger import FleetLedger
from kqp.quotas.fleet.store import FleetStore
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
             down: tuple[float, float] | None = None, algorithm: str = SAMPLED,
             starts: Sequence[float] | None = None, stalls: Sequence[tuple[int, float, float]] = (),
             timeout: float = 0.25) -> FleetRun:
    """Run the fleet for `seconds`; `down=(from, to)`: every exchange in that interval fails.

    `starts`: when each process's client begins (default: spread evenly over `start_spread`).
    `stalls`: (process, from, to) intervals during which that process runs nothing.
    """
    settings = QuotaSettings(window_size, window_count,
                             {EntitySpec(None, PRINCIPAL.client_id): {"producer_byte_rate": quota}},
                             algorithm=algorithm)
    store = FleetStore()
    managers: list[QuotaManager] = []
    for i in range(processes):
        ledger = None if sync_interval is None else FleetLedger(
            f"p{i}", f"e{i}", window_size, window_count, processes, sync_interval)
        managers.append(QuotaManager(settings, 0.0, ledger))
    queue: list[tuple[float, int, str, int, object]] = []   # (time, order, kind, process, exchange)
    order = 0

    def push(at: float, kind: str, index: int, exchange: object = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(queue, (at, order, kind, index, exchange))

    def stalled_until(index: int, at: float) -> float | None:
        return next((end for p, begin, end in stalls if p == index and begin <= at < end), None)

    for i in range(processes):
        push(starts[i] if starts is not None else start_spread * i / max(1, processes - 1), "send", i)
        if sync_interval is not None:
            push(sync_interval * i / processes, "sync", i)
    events: list[tuple[float, int]] = []
    while queue:
        now, _, kind, i, exchange = heapq.heappop(queue)
        if now > seconds:
            break
        resume = None if kind == "store" else stalled_until(i, now)
        if resume is not None:
            push(resume, kind, i, exchange)
            continue
        m = managers[i]
        if kind == "send":
            violations = m.record_produce(PRINCIPAL, request_bytes, 1, 1, now)
            events.append((now, request_bytes))
            delay = max((v.throttle_seconds for v in violations), default=0.0)
            push(now + rtt + delay, "send", i)
        elif kind == "sync":
            assert m.fleet is not None and sync_interval is not None
            request = m.fleet.collect(now)
            if down is not None and down[0] <= now < down[1]:
                m.fleet.failed(request)
                push(now + sync_interval, "sync", i)
            else:
                push(now + exchange_seconds / 2, "store", i, (request, now))
        elif kind == "store":   # the store is never starved: it answers on time
            request, sent = exchange  # type: ignore[misc]
            push(sent + exchange_seconds, "merge", i, (request, sent, store.exchange(request, now)))
        else:   # "merge": the reply is read when the loop runs, late if it was stalled
            assert m.fleet is not None and sync_interval is not None
            request, sent, reply = exchange  # type: ignore[misc]
            if now - sent > timeout:
                m.fleet.failed(request)
            else:
                m.fleet.merge(request, reply, sent, now)
            push(max(now, sent + sync_interval), "sync", i)
    return FleetRun(events, window_size * window_count)


def random_stalls(processes: int, seconds: float, length: float, share: float,
                  seed: int) -> list[tuple[int, float, float]]:
    """Stalls for `simulate`: each process stalls for 0.5-1.5 x `length` at random, about `share`
    of the time (exponential gaps), the same for a given `seed`."""
    rnd = random.Random(seed)
    stalls: list[tuple[int, float, float]] = []
    for process in range(processes):
        at = rnd.uniform(0, 1)
        while at < seconds:
            stall = rnd.uniform(0.5 * length, 1.5 * length)
            stalls.append((process, at, at + stall))
            at += stall + rnd.expovariate(share / length)
    return stalls


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
