"""Several connections of one quota key on a simulated clock: the quota manager and each connection's
throttling room, nothing else.

A producer keeps one connection per broker that leads its partitions; every one of them charges the
same sensor. Each of the `connections` here is a client that honours `throttle_time_ms` (librdkafka
and the Java client do, per broker, KIP-219): it has one request of `request_bytes` in flight at a
time and sends the next as soon as the throttle it was told has passed (plus `client_gap`); with
`backs_off=False` it sends it at once, and it waits in the muted socket instead, which comes to the
same for the rate: what kqp reads is what its mutes let in. kqp's side is the connection core's, step
for step, with the real parts: a request is read when its connection is not muted (`resume` after a
mute ends, as the edge reads again on the next loop turn), charged (`QuotaManager.record_produce`),
forwarded, its throttle decided and muted for from then (`Throttling.decide`, `Throttling.mute`), and
answered `latency` later, telling that throttle. Timers fire in deadline order, ties in the order
they were set, as the delay queue's do.

What reached the upstream is returned as (time, bytes) events, for the judgements the end-to-end
tests make on the wire (helpers.quota_analysis), with what each request waited in kqp beyond what
its client was told. Used by tests/connection/test_several_connections_sim.py and for the figures
in quotas/README.md ("Several connections of one key").
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from helpers.host import PartHost
from kqp.protocol.apis import ApiKey
from kqp.proxy.connection.events import Action, SetTimer
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.connection.plans import PASS, Flight, Progress
from kqp.proxy.connection.throttling import Throttling
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import EntitySpec, Principal, QuotaSettings

PRINCIPAL = Principal("ANONYMOUS", "producer")
PRODUCE = int(ApiKey.Produce)


@dataclass
class ConnectionsRun:
    events: list[tuple[float, int]]                           # (time, bytes) of every request forwarded
    waits: list[float] = field(default_factory=list)          # per request: read time - time sent
    per_connection: list[int] = field(default_factory=list)   # requests forwarded per connection


@dataclass
class _Conn:
    room: Throttling
    timer: float | None = None     # the connection's one timer (SetTimer replaces it)
    sent_at: float | None = None   # a request on the socket, unread
    told_until: float = 0.0        # when the throttle the client was told last ends, as it reckons it


def simulate(connections: int, quota: float, seconds: float, *, request_bytes: int = 16384,
             window_size: float = 0.2, window_count: int = 11, latency: float = 0.002, client_gap: float = 0.0005,
             resume: float = 0.0002, jitter: float = 0.0, seed: int = 1, backs_off: bool = True,
             algorithm: str = "steady") -> ConnectionsRun:
    """Run `connections` producers of one client id flat out for `seconds`; `jitter`: request sizes
    uniform in `request_bytes` x (1 +- jitter), the same for a given `seed`."""
    rnd = random.Random(seed)
    settings = QuotaSettings(window_size, window_count, {EntitySpec(None, PRINCIPAL.client_id): {
        "producer_byte_rate": quota}}, algorithm=algorithm)
    manager = QuotaManager(settings, 0.0)
    hosts = [PartHost() for _ in range(connections)]
    conns = [_Conn(Throttling(host, ProxyObserver())) for host in hosts]
    run = ConnectionsRun([], per_connection=[0] * connections)
    queue: list[tuple[float, int, str, int, Flight | None]] = []
    order = 0

    def push(at: float, kind: str, index: int, entry: Flight | None = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(queue, (at, order, kind, index, entry))

    def timers(index: int, out: list[Action]) -> None:
        for action in out:
            if isinstance(action, SetTimer) and action.at is not None:
                conns[index].timer = action.at
                push(action.at, "timer", index)

    def read(index: int, now: float) -> None:
        conn = conns[index]
        size = request_bytes if not jitter else round(request_bytes * rnd.uniform(1 - jitter, 1 + jitter))
        entry = Flight(index, PRODUCE, 9, PRINCIPAL, now, PASS, Progress())
        violations = manager.record_produce(PRINCIPAL, size, 1, 1, now)
        run.per_connection[index] += 1
        assert conn.sent_at is not None
        run.waits.append(now - max(conn.sent_at, conn.told_until))   # beyond what the client was told
        conn.sent_at = None
        forward(index, entry, size, now)
        # As the core: forwarded, then decided once and muted for from now on.
        throttle = entry.progress.throttle = conn.room.decide(entry, violations, now) if violations else None
        if throttle is not None:
            conn.room.mute(entry, throttle, now)
        timers(index, hosts[index].taken())

    def forward(index: int, entry: Flight, size: int, now: float) -> None:
        run.events.append((now, size))
        push(now + latency, "response", index, entry)

    for index in range(connections):
        push(0.001 * index, "send", index)
    while queue:
        now, _, kind, index, entry = heapq.heappop(queue)
        if now > seconds:
            break
        conn = conns[index]
        if kind == "send":      # the client puts its next request on the socket
            conn.sent_at = now
            if not conn.room.muted:
                read(index, now)
        elif kind == "read":    # the edge reads again after a mute
            if conn.sent_at is not None and not conn.room.muted:
                read(index, now)
        elif kind == "timer":
            if conn.timer != now:   # replaced by a later SetTimer
                continue
            ended = conn.room.timer_fired(now)
            timers(index, hosts[index].taken())
            if ended and conn.sent_at is not None:
                push(now + resume, "read", index)
        else:                   # the response: KIP-219, sent at once telling the throttle decided at read
            assert entry is not None
            throttle = entry.progress.throttle
            told = throttle.ms / 1000 if throttle is not None else 0.0
            conn.told_until = now + told
            push(now + (told if backs_off else 0.0) + client_gap, "send", index)
    return run
