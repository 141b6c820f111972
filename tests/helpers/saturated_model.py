"""A saturated broker on a simulated clock: an adaptive (or static) pool of two jobs and a bystander.

The model is the saturated test upstream's (saturated_upstream.py), in events instead of sockets:
everything anyone sends joins one FIFO drained at C bytes per second, so a request's latency is the
backlog ahead of it divided by C. The FIFO holds at most `queue_bytes`; beyond that a sender's
bytes wait in its connection (`socket_bytes` of them) and then the sender stops, as the relay's
backpressure makes kqp and the client stop.

* Two pool members produce flat out (`request_bytes` per Produce, many in flight, as librdkafka).
  kqp charges each request to the member's quota when it forwards it and mutes the member at once
  for the throttle; the response, when it comes, mutes it again for the same throttle (KIP-219).
  The member's quota is its allocation, half the pool's budget (weighted max-min with equal weights
  and both members wanting more than half), enforced by kqp's `QuotaSensor`: Kafka's sampled rate
  or, with `token_bucket=True`, KIP-599's bucket (README "Quota algorithms").
* The bystander, outside the pool, sends a small Produce every `bystander_interval` seconds and is
  never throttled.
* Every quota window the pool's `AdaptiveBudget` gets the window's `WindowSignals` (the latency and
  bytes of the members' answered Produce requests) and the pool's demand (bytes offered; a member
  muted during the window wants at least its allocation), and the allocations follow the budget.
  `adaptive=False` keeps the configured budget: the static pool.
* `fleet=True` puts each member behind a kqp process of its own: each process reports its member's
  windows to a shared `AdaptiveStore` every `sync_interval` (pools/adaptive_fleet.py), and each holds its
  member to half of the budget its replica holds, so the two must agree for the split to be fair.

Everything is a pure function of the scenario: no clock, no randomness.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from kqp.quotas.pools.adaptive_fleet import AdaptiveRequest, AdaptiveStore, FleetBudget, Report
from kqp.quotas.pools.adaptive_law import AdaptiveBudget, adaptive_floor
from kqp.quotas.pools.upstream_signals import SignalCollector, WindowSignals
from kqp.quotas.rates.sensor import QuotaSensor

BROKER = 1
RTT = 0.0005   # response transfer back to the client
GRACE, KEEP = 2, 20   # fleet: a window is closed 2 windows after its start; reports are kept 20


@dataclass(frozen=True)
class Scenario:
    capacity: float = 400_000.0                  # C, bytes per second
    capacity_changes: tuple[tuple[float, float], ...] = ()   # (at, new C)
    seconds: float = 40.0
    adaptive: bool = True
    ceiling: float = 10_000_000.0                # the pool's configured producer_byte_rate
    target: float = 0.1                          # target_latency_ms / 1000
    window: float = 0.2                          # window_size_seconds
    window_count: int = 11
    token_bucket: bool = True
    queue_bytes: int = 1_000_000
    socket_bytes: int = 200_000
    request_bytes: int = 16_450                  # one 16 KiB batch (Java's batch.size) and its headers
    in_flight: int = 1000
    bystander_bytes: int = 150
    bystander_interval: float = 0.05             # 20 messages a second
    fleet: bool = False                          # one kqp process per member, one law through a store
    sync_interval: float = 0.1


@dataclass
class Row:
    """One quota window of a run."""

    at: float
    budget: float
    latency: float | None
    delivered: float          # the pool's delivered rate in the window, bytes/s
    queue: int                # FIFO bytes at the window's end
    reason: str


@dataclass
class Run:
    scenario: Scenario
    rows: list[Row] = field(default_factory=list)
    bystander: list[tuple[float, float]] = field(default_factory=list)      # (sent at, latency)
    replicas: list[tuple[float, ...]] = field(default_factory=list)         # fleet: each process's budget
    delivered: list[tuple[float, int, int]] = field(default_factory=list)   # (answered at, member, bytes)

    def jobs_rate(self, start: float, end: float, member: int | None = None) -> float:
        return sum(n for at, m, n in self.delivered
                   if start <= at < end and (member is None or m == member)) / (end - start)

    def bystander_p99(self, start: float, end: float) -> float:
        latencies = sorted(lat for at, lat in self.bystander if start <= at < end)
        return latencies[max(0, math.ceil(0.99 * len(latencies)) - 1)] if latencies else math.nan

    def budgets(self, start: float, end: float) -> list[float]:
        return [r.budget for r in self.rows if start <= r.at < end]

    def table(self, start: float = 0.0, end: float = math.inf, every: int = 1) -> str:
        """The budget trace as a small table (for failure messages and the notes)."""
        lines = ["    t  budget kB/s  latency ms  delivered kB/s  queue kB  why"]
        for r in [r for r in self.rows if start <= r.at < end][::every]:
            shown = "-" if r.latency is None else f"{r.latency * 1000:.0f}"
            lines.append(f"{r.at:5.1f}  {r.budget / 1000:11.0f}  {shown:>10}  {r.delivered / 1000:14.0f}  "
                         f"{r.queue / 1000:8.0f}  {r.reason}")
        return "\n".join(lines)


@dataclass
class _Request:
    source: int               # member index, or -1 for the bystander
    size: int
    sent: float
    throttle: float = 0.0


@dataclass
class _Member:
    sensor: QuotaSensor
    muted_until: float = 0.0
    in_flight: int = 0
    blocked: int = 0          # bytes waiting in the connection for room in the FIFO
    offered: int = 0          # bytes forwarded this window


def simulate(s: Scenario) -> Run:
    """Run the scenario (module docstring) and return what happened."""
    run = Run(s)
    events: list[tuple[float, int, str, object]] = []
    order = 0

    def at(when: float, kind: str, data: object = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (when, order, kind, data))

    floor = adaptive_floor(s.ceiling)
    law = AdaptiveBudget(s.ceiling, floor, s.target, 0.0) if s.adaptive else None
    budget = law.budget if law else s.ceiling
    members = [_Member(QuotaSensor(budget / 2, s.window, s.window_count, 0.0, token_bucket=s.token_bucket))
               for _ in range(2)]
    collectors = [SignalCollector() for _ in members]
    store = AdaptiveStore()
    replicas = [FleetBudget("pool", AdaptiveBudget(s.ceiling, floor, s.target, 0.0), s.window,
                            grace_windows=GRACE, keep_windows=KEEP) for _ in members] if s.fleet else []
    capacity = s.capacity
    fifo: deque[_Request] = deque()
    waiting: deque[_Request] = deque()   # arrived while the FIFO was full, in arrival order
    queued = 0
    serving = False

    def serve(now: float) -> None:
        nonlocal serving
        serving = bool(fifo)
        if serving:
            at(now + fifo[0].size / capacity, "served")

    def forward(now: float, request: _Request) -> None:
        nonlocal queued
        if queued >= s.queue_bytes:
            waiting.append(request)
            if request.source >= 0:
                members[request.source].blocked += request.size
            return
        fifo.append(request)
        queued += request.size
        if not serving:
            serve(now)

    def send(now: float, index: int) -> None:
        m = members[index]
        while now >= m.muted_until and m.in_flight < s.in_flight and m.blocked < s.socket_bytes:
            request = _Request(index, s.request_bytes, now, m.sensor.charge(s.request_bytes, now))
            m.in_flight += 1
            m.offered += request.size
            forward(now, request)
            if request.throttle > 0:   # kqp mutes at once: Produce bytes are known on arrival
                m.muted_until = max(m.muted_until, now + request.throttle)
                at(m.muted_until, "send", index)

    for index in range(2):
        at(0.0, "send", index)
    at(0.0, "bystander")
    at(s.window, "window")
    for when, capacity_then in s.capacity_changes:
        at(when, "capacity", capacity_then)
    for index in range(len(replicas)):
        at(s.sync_interval * (0.5 + index / len(replicas)), "sync", index)
    while events:
        now, _, kind, data = heapq.heappop(events)
        if now > s.seconds:
            break
        if kind == "send":
            send(now, int(data))  # type: ignore[call-overload]
        elif kind == "served":
            request = fifo.popleft()
            queued -= request.size
            while waiting and queued < s.queue_bytes:
                moved = waiting.popleft()
                fifo.append(moved)
                queued += moved.size
                if moved.source >= 0:
                    members[moved.source].blocked -= moved.size
                    at(now, "send", moved.source)
            serve(now)
            at(now + RTT, "answer", request)
        elif kind == "answer":
            request = data  # type: ignore[assignment]
            assert isinstance(request, _Request)
            if request.source < 0:
                run.bystander.append((request.sent, now - request.sent))
                continue
            m = members[request.source]
            m.in_flight -= 1
            collectors[request.source].response(BROKER, now - request.sent, request.size)
            run.delivered.append((now, request.source, request.size))
            if request.throttle > 0:   # KIP-219: the response goes with its throttle, then the mute
                m.muted_until = max(m.muted_until, now + request.throttle)
            at(max(now, m.muted_until), "send", request.source)
        elif kind == "bystander":
            forward(now, _Request(-1, s.bystander_bytes, now))
            at(now + s.bystander_interval, "bystander")
        elif kind == "capacity":
            capacity = float(data)  # type: ignore[arg-type]
        elif kind == "sync":
            index = int(data)  # type: ignore[call-overload]
            replica = replicas[index]
            request = AdaptiveRequest(f"p{index}", round(s.window * 1000), GRACE, KEEP, (replica.collect(),))
            replica.merge(store.exchange(request, now).budgets[0], now, len(replicas))
            members[index].sensor.set_limit(replica.budget / 2)
            at(now + s.sync_interval, "sync", index)
        elif kind == "window":
            windows = [c.take(s.window) for c in collectors]
            demands = [max(m.offered / s.window, m.sensor.limit if m.muted_until > now - s.window else 0.0)
                       for m in members]
            signals = WindowSignals.merged(windows)
            reason = "static"
            if replicas:
                ended = round(now / s.window) - 1
                for index, replica in enumerate(replicas):
                    members[index].sensor.set_limit(replica.close_window(ended, Report(windows[index], demands[index]))
                                                    / 2)
                run.replicas.append(tuple(r.budget for r in replicas))
                law = replicas[0].law
                budget = law.budget
                reason = law.reason or "hold"
            elif law is not None:
                budget = law.update(now, signals, sum(demands))
                reason = law.reason or "hold"
                for m in members:
                    m.sensor.set_limit(budget / 2)
            latency = law.latency if law is not None else None
            run.rows.append(Row(now, budget, latency, signals.delivered_rate, queued, reason))
            for m in members:
                m.offered = 0
            at(now + s.window, "window")
    return run
