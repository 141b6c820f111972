"""Judging what two wire taps saw: achieved rates, and whether a muted connection stayed silent.

Pure functions over the taps' records, so they are unit-tested with made-up timelines
(tests/e2e/test_quota_analysis.py) before any live test leans on them.

Rates. Kafka's sampled rate lets a fresh entity send about `(window_count - 1) * window_size`
seconds' worth of quota at once, and when a burst's sample ages out the entity may burst again, so
the achieved rate is a sawtooth around the quota whose period is about one measured span
(`window_count * window_size`). An average between two arbitrary instants of a short run swings
with where the teeth fall; the least-squares slope of cumulative bytes against time does not, and
is what "the rate the upstream received" means in these tests. Its companion is the upper bound a
quota promises at every instant: no trailing span holds more than a span's worth of quota plus the
one request that crossed it (`max_trailing_rate`). Where a client may stall on a busy host and then
catch up, `ceiling_slope` fits only the points at the ceiling the quota holds it to.

Muting. A connection throttled by T at the moment kqp handled the upstream's response (the
upstream tap's response time r, never later than kqp's) must send nothing upstream in
`(r + slack, r + T - slack)`; the slack absorbs the few milliseconds between a frame leaving kqp
and reaching a tap. Client and upstream connections are paired by the requests they carried: kqp
keeps one upstream connection per client connection and forwards requests unchanged, so their
(api key, version, correlation id, client id) sequences agree, except for the ApiVersions requests
kqp answers itself.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kqp.protocol.apis import ApiKey

from .wire_tap import WireRequest, WireResponse, WireTap

Event = tuple[float, int]  # (time, bytes or count)


def cumulative_slope(events: Sequence[Event], start: float, end: float) -> float:
    """Least-squares slope (units/s) of cumulative units against time, over events in [start, end]."""
    return _slope(_cumulative(events, start, end))


def ceiling_slope(events: Sequence[Event], start: float, end: float, *, quota: float, reach: float,
                  depth: float) -> float:
    """`cumulative_slope` of the points at the ceiling the quota holds a client to, leaving out the
    dips: a point more than `depth` units under the quota's line through a point within `reach`
    seconds of it.

    A client that stalls for a moment (its process not scheduled on a busy host) falls under the
    quota's line and then catches up, as Kafka's sampled rate lets it within a span. An early dip
    tilts the plain slope up, a late one down, by several percent over tens of seconds, though the
    quota held the client throughout. The dips are the client's; the ceiling is the quota's. Points
    above the line are never left out, so a rate over the quota or a burst let through still shows;
    and any subset of a straight line has its slope, so a steady rate under the quota shows too.
    """
    points = _cumulative(events, start, end)
    over = [c - quota * t for t, c in points]            # how far ahead of the quota's line
    times = [t for t, _ in points]
    kept = [p for i, p in enumerate(points)
            if over[i] >= max(over[bisect.bisect_left(times, p[0] - reach):
                                   bisect.bisect_right(times, p[0] + reach)]) - depth]
    return _slope(kept if len(kept) >= 3 else points)


def _cumulative(events: Sequence[Event], start: float, end: float) -> list[tuple[float, float]]:
    total = 0
    points: list[tuple[float, float]] = []
    for at, amount in sorted(events):
        total += amount
        if start <= at <= end:
            points.append((at, float(total)))
    if len(points) < 3:
        raise ValueError(f"only {len(points)} events between {start:.2f}s and {end:.2f}s: no rate to judge")
    return points


def _slope(points: Sequence[tuple[float, float]]) -> float:
    mean_t = statistics.fmean(t for t, _ in points)
    mean_c = statistics.fmean(c for _, c in points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (c - mean_c) for t, c in points) / spread


def average_rate(events: Iterable[Event], start: float, end: float) -> float:
    """Units per second between `start` (inclusive) and `end` (exclusive)."""
    return sum(amount for at, amount in events if start <= at < end) / (end - start)


def forfeited(events: Sequence[Event], quota: float, capacity: float, start: float, end: float) -> float:
    """Seconds of quota a client left unused in [start, end] beyond what it may carry (`capacity`
    seconds of it: Kafka's first allowance), so lost to it under the quota's own arithmetic: a bucket
    filled at `quota` per second up to `capacity`, full at the first event, spent by each event."""
    ordered = sorted(events)
    if not ordered:
        return 0.0
    tokens, last, lost = capacity, ordered[0][0], 0.0

    def refill(until: float) -> None:
        nonlocal tokens, lost
        tokens += until - last
        if tokens > capacity:   # full since `until - (tokens - capacity)`: what came after is lost
            lost += max(0.0, min(until, end) - max(until - (tokens - capacity), start))
            tokens = capacity

    for at, amount in ordered:
        refill(at)
        last = at
        tokens -= amount / quota
    if end > last:
        refill(end)
    return lost


def max_trailing_rate(events: Sequence[Event], span: float, start: float, end: float) -> float:
    """The most units any `span`-long interval ending at an event in [start, end] held, per second."""
    ordered = sorted(events)
    best = 0.0
    low = 0
    running = 0
    for at, amount in ordered:
        running += amount
        while ordered[low][0] <= at - span:
            running -= ordered[low][1]
            low += 1
        if start <= at <= end:
            best = max(best, running / span)
    return best


def request_events(requests: Iterable[WireRequest]) -> list[Event]:
    return [(r.at, r.size) for r in requests]


def response_events(responses: Iterable[WireResponse]) -> list[Event]:
    return [(r.at, r.size) for r in responses]


def fetch_response_events(tap: WireTap, client_id: str, api_key: int = ApiKey.Fetch) -> list[Event]:
    """(time, size) of every Fetch (or `api_key`: ShareFetch) response to `client_id`'s requests, as
    `tap` saw them."""
    asked = {(r.connection, r.correlation_id) for r in tap.requests(client_id=client_id, api_key=api_key)}
    return [(r.at, r.size) for r in tap.responses(api_key=api_key) if (r.connection, r.correlation_id) in asked]


def _signature(requests: Iterable[WireRequest]) -> tuple[tuple[int, int, int, str | None], ...]:
    return tuple((r.api_key, r.api_version, r.correlation_id, r.client_id)
                 for r in sorted(requests, key=lambda r: r.at) if r.api_key != ApiKey.ApiVersions)


def pair_connections(client_tap: WireTap, upstream_tap: WireTap) -> dict[int, int]:
    """Client-tap connection number -> upstream-tap connection number, where the pairing is certain.

    A client connection pairs with the upstream connection whose requests are a prefix of its own
    (the upstream may lag: requests still held by a mute). Connections whose requests could belong
    to several upstream connections (two identical one-Metadata bootstrap probes) stay unpaired.
    """
    by_conn: dict[int, list[WireRequest]] = {}
    for r in client_tap.requests():
        by_conn.setdefault(r.connection, []).append(r)
    up_by_conn: dict[int, list[WireRequest]] = {}
    for r in upstream_tap.requests():
        up_by_conn.setdefault(r.connection, []).append(r)
    up_signatures = {number: _signature(reqs) for number, reqs in up_by_conn.items()}
    pairs: dict[int, int] = {}
    for number, reqs in by_conn.items():
        mine = _signature(reqs)
        if not mine:
            continue
        matches = [u for u, sig in up_signatures.items() if sig and mine[:len(sig)] == sig]
        if len(matches) == 1:
            pairs[number] = matches[0]
        elif len(matches) > 1:
            longest = max(len(up_signatures[u]) for u in matches)
            best = [u for u in matches if len(up_signatures[u]) == longest]
            if len(best) == 1 and longest > 1:
                pairs[number] = best[0]
    return pairs


@dataclass(frozen=True, slots=True)
class MuteBreach:
    """A request that reached the upstream while its connection was muted."""

    client_connection: int
    upstream_connection: int
    throttle_ms: int
    throttled_at: float      # upstream tap's time for the throttled request: its mute starts when kqp reads it
    request: WireRequest

    def __str__(self) -> str:
        into = self.request.at - self.throttled_at
        return (f"connection {self.client_connection}: api {self.request.api_key} "
                f"corr {self.request.correlation_id} reached the upstream {into * 1000:.0f} ms into a "
                f"{self.throttle_ms} ms throttle")


@dataclass(frozen=True, slots=True)
class MuteReport:
    throttled_responses: int       # responses with throttle_time_ms > 0 to the client id
    checked: int                   # ... whose connection was paired, so the mute was checked
    breaches: list[MuteBreach]
    throttle_ms: list[int]


def mute_report(client_tap: WireTap, upstream_tap: WireTap, client_id: str, *,
                slack: float = 0.05) -> MuteReport:
    """Check every throttled response `client_id` received against what its connection sent upstream.
    KIP-219 as kqp keeps it: the connection is muted from the moment kqp read the throttled request
    (it forwards it at once: the upstream tap's time for it) for as long as its response tells, so
    nothing else of that connection may reach the upstream meanwhile."""
    pairs = pair_connections(client_tap, upstream_tap)
    mine = {r.connection for r in client_tap.requests(client_id=client_id)}
    upstream_responses = {(r.connection, r.correlation_id): r for r in upstream_tap.responses()}
    upstream_requests: dict[int, list[WireRequest]] = {}
    forwarded: dict[tuple[int, int], WireRequest] = {}
    for r in upstream_tap.requests():
        upstream_requests.setdefault(r.connection, []).append(r)
        forwarded[r.connection, r.correlation_id] = r
    throttled = [r for r in client_tap.responses() if r.connection in mine and (r.throttle_ms or 0) > 0]
    breaches: list[MuteBreach] = []
    checked = 0
    for response in throttled:
        up = pairs.get(response.connection)
        if up is None:
            continue
        request = forwarded.get((up, response.correlation_id))
        if request is None or (up, response.correlation_id) not in upstream_responses:
            continue
        checked += 1
        assert response.throttle_ms is not None
        low, high = request.at + slack, request.at + response.throttle_ms / 1000 - slack
        breaches.extend(MuteBreach(response.connection, up, response.throttle_ms, request.at, r)
                        for r in upstream_requests.get(up, []) if low < r.at < high)
    return MuteReport(len(throttled), checked, breaches, [r.throttle_ms or 0 for r in throttled])


def unanswered_closes(tap: WireTap, *, ignore: frozenset[int] = frozenset(), min_age: float = 1.0) -> list[str]:
    """Connections a client closed while a request it had waited `min_age` s for was still unanswered.

    A client whose request times out closes its connection (the responses would be out of step),
    so this is how a timeout shows on the wire, whatever the client. Younger requests are not
    timeouts: librdkafka retires its bootstrap connection with a FindCoordinator in flight.
    `ignore` names api keys a client may abandon at any age (a consumer closing mid long-poll).
    """
    out: list[str] = []
    for c in tap.connections():
        owed = [(k, round(age, 2)) for k, age in c.unanswered_at_close if k not in ignore and age >= min_age]
        if owed and c.closed_by == "client":
            out.append(f"connection {c.number} on {c.hop}: closed by the client owing responses "
                       f"(api key, seconds waited) {owed}")
    return out
