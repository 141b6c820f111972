"""Service classes on a saturated broker, simulated: kqp's own quota manager in front of one FIFO.

The broker is helpers/saturated_model.py's (everything anyone sends joins one FIFO drained at C
bytes/s, bounded at `queue_bytes`; beyond that a client's bytes wait in its connection, up to
`socket_bytes`, and then it stops). In front of it runs a real `QuotaManager` with the pool as
configured: each Produce is charged with `record_produce` when kqp forwards it and its client is
muted for the throttle, again when the response comes (KIP-219); the adaptive pool hears of every
Produce sent and answered (`AdaptivePool.sent/answered/observe`, as charging.py feeds it), and the
upkeep closes idle windows once a second (`Pools.expire`), as `kqp run` does.

* Batch jobs produce flat out: 16 kB requests, as many in flight as the connection takes.
* The stream creates a record of `record_bytes` every `record_bytes / stream_rate` seconds, from
  `stream_start` to `stream_stop`; every `linger` it sends what its queue holds in one request (up
  to `max_request_bytes`), unless muted or its connection is full (librdkafka's linger.ms). A
  record's latency runs from its creation to its answer, as the stream's client sees it.

Everything is a pure function of the scenario: no clock, no randomness.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kqp.config import quota_settings_from
from kqp.quotas.manager import QuotaManager, combine
from kqp.quotas.model import ChargeKind, Principal, QuotaType

BROKER = 1
RTT = 0.0005          # a response's way back
UPKEEP = 1.0          # kqp's periodic upkeep
PRODUCER = QuotaType.PRODUCER_BYTE_RATE


@dataclass(frozen=True)
class Scenario:
    quotas: dict[str, Any]                               # the quotas: section, a pool named "ingest"
    capacity: float = 400_000.0
    capacity_changes: tuple[tuple[float, float], ...] = ()   # (at, new C)
    seconds: float = 30.0
    batch: tuple[str, ...] = ("job-batch-1", "job-batch-2", "job-batch-3", "job-batch-4")
    stream: str = "job-stream-1"
    stream_rate: float = 100_000.0
    stream_start: float = 0.0
    stream_stop: float = math.inf
    record_bytes: int = 1000
    linger: float = 0.005
    max_request_bytes: int = 1_000_000   # librdkafka's message.max.bytes: what one request may carry
    request_bytes: int = 16_450
    queue_bytes: int = 1_000_000
    socket_bytes: int = 200_000


@dataclass
class Run:
    delivered: dict[str, list[tuple[float, int]]] = field(default_factory=dict)   # client -> (answered, bytes)
    latencies: list[tuple[float, float]] = field(default_factory=list)            # stream: (created, latency)
    offered: list[tuple[float, int]] = field(default_factory=list)                # stream: (created, bytes)
    trace: list[tuple[float, float, tuple[float, ...]]] = field(default_factory=list)   # (at, budget, per class)
    manager: QuotaManager | None = None

    def rate(self, clients: list[str] | str, start: float, end: float) -> float:
        names = [clients] if isinstance(clients, str) else clients
        return sum(n for c in names for at, n in self.delivered.get(c, []) if start <= at < end) / (end - start)

    def offered_rate(self, start: float, end: float) -> float:
        return sum(n for at, n in self.offered if start <= at < end) / (end - start)

    def p99(self, start: float, end: float) -> float:
        ordered = sorted(lat for at, lat in self.latencies if start <= at < end)
        return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)] if ordered else math.nan


@dataclass
class _Client:
    principal: Principal
    muted_until: float = 0.0
    blocked: int = 0
    queue: deque[tuple[float, int]] = field(default_factory=deque)   # the stream's records: (created, bytes)
    waiting: bool = False        # a send is scheduled


@dataclass(eq=False)   # hashed by identity: the adaptive pool's token for it
class _Request:
    client: _Client
    size: int
    sent: float
    throttle: float
    records: tuple[tuple[float, int], ...] = ()


def simulate(s: Scenario) -> Run:
    run = Run()
    m = QuotaManager(quota_settings_from(s.quotas), 0.0)
    run.manager = m
    ledger = m.pools.ledgers[("ingest", PRODUCER)]
    events: list[tuple[float, int, str, Any]] = []
    order = 0

    def at(when: float, kind: str, data: Any = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (when, order, kind, data))

    clients = {name: _Client(Principal("ANONYMOUS", name)) for name in (*s.batch, s.stream)}
    stream = clients[s.stream]
    capacity = s.capacity
    fifo: deque[_Request] = deque()
    waiting: deque[_Request] = deque()
    queued = 0
    serving = False

    def serve(now: float) -> None:
        nonlocal serving
        serving = bool(fifo)
        if serving:
            at(now + fifo[0].size / capacity, "served")

    def forward(now: float, client: _Client, size: int, records: tuple[tuple[float, int], ...] = ()) -> None:
        nonlocal queued
        throttle = combine(m.record_produce(client.principal, size, max(1, len(records)), 1, now))[0]
        request = _Request(client, size, now, throttle, records)
        for pool in m.pools.watching(client.principal, ChargeKind.PRODUCE):
            pool.sent(request, now)
        if throttle > 0:   # kqp knows a Produce's bytes on arrival: the mute starts at once
            client.muted_until = max(client.muted_until, now + throttle)
        if queued >= s.queue_bytes:
            waiting.append(request)
            client.blocked += size
            return
        fifo.append(request)
        queued += size
        if not serving:
            serve(now)

    def send_batch(now: float, client: _Client) -> None:
        client.waiting = False
        while now >= client.muted_until and client.blocked < s.socket_bytes:
            forward(now, client, s.request_bytes)
        if not client.waiting and now < client.muted_until:
            client.waiting = True
            at(client.muted_until, "batch", client)

    for name in s.batch:
        at(0.0, "batch", clients[name])
    at(s.stream_start, "record")
    at(s.stream_start, "linger")
    at(0.0, "trace")
    at(UPKEEP, "upkeep")
    for when, new in s.capacity_changes:
        at(when, "capacity", new)
    names = [c.name for c in ledger.classes]
    while events:
        now, _, kind, data = heapq.heappop(events)
        if now > s.seconds:
            break
        if kind == "batch":
            send_batch(now, data)
        elif kind == "record":
            if now < s.stream_stop:
                stream.queue.append((now, s.record_bytes))
                run.offered.append((now, s.record_bytes))
                at(now + s.record_bytes / s.stream_rate, "record")
        elif kind == "linger":
            if stream.queue and now >= stream.muted_until and stream.blocked < s.socket_bytes:
                taken: list[tuple[float, int]] = []
                size = 0
                while stream.queue and size + stream.queue[0][1] <= s.max_request_bytes:
                    taken.append(stream.queue.popleft())
                    size += taken[-1][1]
                forward(now, stream, size, tuple(taken))
            if now < s.stream_stop or stream.queue:
                at(now + s.linger, "linger")
        elif kind == "served":
            request = fifo.popleft()
            queued -= request.size
            while waiting and queued < s.queue_bytes:
                moved = waiting.popleft()
                fifo.append(moved)
                queued += moved.size
                moved.client.blocked -= moved.size
                if moved.client is not stream and not moved.client.waiting:
                    moved.client.waiting = True
                    at(now, "batch", moved.client)
            serve(now)
            at(now + RTT, "answer", request)
        elif kind == "answer":
            request = data
            client = request.client
            for pool in m.pools.watching(client.principal, ChargeKind.PRODUCE):
                pool.answered(request)
                pool.observe(now, BROKER, now - request.sent, (request.size, max(1, len(request.records)), 1, 1), 0)
            run.delivered.setdefault(client.principal.client_id, []).append((now, request.size))
            for created, _ in request.records:
                run.latencies.append((created, now - created))
            if request.throttle > 0:   # KIP-219: the response with its throttle, then the mute
                client.muted_until = max(client.muted_until, now + request.throttle)
            if client is not stream and not client.waiting:
                client.waiting = True
                at(max(now, client.muted_until), "batch", client)
        elif kind == "capacity":
            capacity = float(data)
        elif kind == "upkeep":
            m.pools.expire(now, 300.0)
            at(now + UPKEEP, "upkeep")
        elif kind == "trace":
            m.pools.snapshot(now)
            run.trace.append((now, ledger.budget, tuple(ledger.class_allocations()) if names else ()))
            at(now + ledger.settings.window_size_seconds, "trace")
    return run
