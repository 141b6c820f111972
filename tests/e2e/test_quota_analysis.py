"""The yardsticks the live quota tests use, checked on made-up timelines (pure, no sockets).

The live tests judge kqp with `helpers.quota_analysis`; if a yardstick were wrong they would pass
or fail for the wrong reason. Here each is checked against timelines whose answer is known, and
the rate criterion itself ("within 10% of the quota once the first span has passed") against an
ideal proxy: a client admitted exactly by Kafka's arithmetic (kqp's own QuotaSensor, the pure
model) meets it, and an unthrottled client does not.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from helpers.quota_analysis import (
    average_rate,
    ceiling_slope,
    cumulative_slope,
    forfeited,
    max_trailing_rate,
    mute_report,
    pair_connections,
    unanswered_closes,
)
from helpers.wire_tap import WireConnection, WireRequest, WireResponse

from kqp.quotas.model import SAMPLED, STEADY
from kqp.quotas.rates.sensor import QuotaSensor


def test_slope_of_a_steady_stream_is_its_rate() -> None:
    events = [(i * 0.1, 1000) for i in range(100)]          # 1000 B every 100 ms = 10 kB/s
    assert cumulative_slope(events, 1.0, 9.0) == pytest.approx(10_000)
    assert average_rate(events, 1.0, 9.0) == pytest.approx(10_000)


def test_slope_needs_events_to_judge() -> None:
    with pytest.raises(ValueError, match="no rate to judge"):
        cumulative_slope([(0.0, 1), (5.0, 1)], 1.0, 4.0)


def test_trailing_rate_sees_a_burst_the_average_hides() -> None:
    events = [(i * 1.0, 1000) for i in range(10)] + [(5.5, 9000)]
    assert average_rate(events, 0.0, 10.0) == pytest.approx(1900)
    assert max_trailing_rate(events, 1.0, 0.0, 10.0) == pytest.approx(10_000)  # (4.5, 5.5]: 1000 + 9000


def ideal_proxy(quota: float, request: int, seconds: float, *, seed: int, algorithm: str = SAMPLED,
                stalls: Sequence[tuple[float, float]] = ()) -> list[tuple[float, int]]:
    """Arrival times of a client always ready to send, admitted exactly by Kafka's arithmetic (or kqp's
    `algorithm`); `stalls` (from, seconds): times the client itself sends nothing (not scheduled)."""
    rnd = random.Random(seed)
    sensor = QuotaSensor(quota, 0.2, 11, 0.0, algorithm=algorithm)
    now, events = 0.0, []
    while now < seconds:
        size = int(request * rnd.uniform(0.7, 1.0))
        throttle = sensor.charge(size, now)
        events.append((now, size))
        now += throttle + rnd.uniform(0.001, 0.01)          # the client's own turnaround
        for at, seconds_stalled in stalls:
            if at <= now < at + seconds_stalled:
                now = at + seconds_stalled
    return events


@pytest.mark.parametrize("seed", range(5))
def test_rate_criterion_is_met_by_kafkas_arithmetic(seed: int) -> None:
    events = ideal_proxy(100_000, 16_400, 7.3, seed=seed)
    rate = cumulative_slope(events, events[0][0] + 2.2, 7.3)
    assert abs(rate - 100_000) <= 10_000, f"an ideal proxy achieves {rate:.0f} B/s"


def test_rate_criterion_fails_an_unthrottled_client() -> None:
    events = [(i * 0.005, 16_400) for i in range(1460)]     # 3.3 MB/s for 7.3 s
    assert cumulative_slope(events, 2.2, 7.3) > 1.1 * 100_000


EARLY_STALLS = [(3.0, 1.5), (5.5, 1.2), (8.0, 1.8), (10.5, 1.0)]   # a busy host, while the run starts


def ceiling(events: Sequence[tuple[float, int]], quota: float = 100_000, depth: float = 0.2) -> float:
    """`ceiling_slope` over 2.2-24 s, as the fidelity matrix judges a 16 KB-request cell through kqp
    (`depth` one window of quota and the largest request)."""
    return ceiling_slope(events, 2.2, 24.0, quota=quota, reach=2.2, depth=depth * quota + 16_400) / quota


@pytest.mark.parametrize("seed", range(3))
def test_ceiling_leaves_out_the_dips_of_a_client_that_stalls(seed: int) -> None:
    events = ideal_proxy(100_000, 16_400, 24.0, seed=seed, algorithm=STEADY, stalls=EARLY_STALLS)
    # The stalls early in the span tilt the plain slope up, though the quota held the client throughout.
    assert cumulative_slope(events, 2.2, 24.0) / 100_000 > 1.02
    assert ceiling(events) == pytest.approx(1.0, abs=0.005)


@pytest.mark.parametrize("admitted", [110_000, 90_000])
def test_ceiling_still_sees_a_rate_off_the_quota(admitted: float) -> None:
    events = ideal_proxy(admitted, 16_400, 24.0, seed=1, algorithm=STEADY, stalls=EARLY_STALLS)
    assert ceiling(events) == pytest.approx(admitted / 100_000, abs=0.005)


def test_ceiling_still_sees_a_burst_let_through() -> None:
    events = [*ideal_proxy(100_000, 16_400, 24.0, seed=2, algorithm=STEADY), (12.0, 300_000)]  # 3 s of quota
    assert ceiling(events) > 1.05


def test_kafkas_sawtooth_is_no_dip_at_a_spans_depth() -> None:
    """Kafka's sampled rate saws by most of a span of quota as bursts age out: judged at a span's
    depth, as the matrix judges Kafka's own cells, nothing is left out."""
    events = ideal_proxy(100_000, 16_400, 24.0, seed=1)
    assert ceiling(events, depth=2.2) == cumulative_slope(events, 2.2, 24.0) / 100_000
    assert ceiling(events, depth=2.2) == pytest.approx(1.0, abs=0.01)


@dataclass
class FakeTap:
    reqs: list[WireRequest] = field(default_factory=list)
    resps: list[WireResponse] = field(default_factory=list)
    conns: list[WireConnection] = field(default_factory=list)

    def requests(self, *, client_id: str | None = None, api_key: int | None = None) -> list[WireRequest]:
        return [r for r in self.reqs if client_id in (None, r.client_id) and api_key in (None, r.api_key)]

    def responses(self, *, api_key: int | None = None) -> list[WireResponse]:
        return [r for r in self.resps if api_key in (None, r.api_key)]

    def connections(self) -> list[WireConnection]:
        return list(self.conns)


def req(at: float, conn: int, corr: int, api: int = 0, client: str = "c") -> WireRequest:
    return WireRequest(at, "hop", conn, api, 7, corr, client, 100, True)


def resp(at: float, conn: int, corr: int, throttle: int | None = 0, api: int = 0) -> WireResponse:
    return WireResponse(at, conn, corr, api, 7, 100, throttle, at)


def taps(upstream_request_at: float) -> tuple[FakeTap, FakeTap]:
    """Client conn 1 = upstream conn 7; corr 5 forwarded (read) at t=9.95, throttled 500 ms, answered
    upstream at t=10.0: the connection is muted 9.95-10.45."""
    client = FakeTap([req(9.0, 1, 18, api=18), req(9.9, 1, 5), req(10.01, 1, 6)],
                     [resp(10.01, 1, 5, throttle=500)])
    upstream = FakeTap([req(9.95, 7, 5), req(upstream_request_at, 7, 6)], [resp(10.0, 7, 5)])
    return client, upstream


def test_request_inside_the_mute_is_a_breach() -> None:
    client, upstream = taps(upstream_request_at=10.2)
    assert pair_connections(client, upstream) == {1: 7}       # type: ignore[arg-type]
    report = mute_report(client, upstream, "c")                 # type: ignore[arg-type]
    assert (report.throttled_responses, report.checked) == (1, 1)
    assert [b.request.correlation_id for b in report.breaches] == [6]
    assert "250 ms into a 500 ms throttle" in str(report.breaches[0])


def test_request_after_the_mute_is_fine() -> None:
    # The mute runs from the throttled request's read, not from its response: 10.47 is past 9.95 + 0.5.
    for at in (10.47, 10.51):
        client, upstream = taps(upstream_request_at=at)
        report = mute_report(client, upstream, "c")             # type: ignore[arg-type]
        assert report.checked == 1 and report.breaches == [], at


def test_identical_connections_stay_unpaired() -> None:
    client = FakeTap([req(1.0, 1, 1, api=3), req(1.0, 2, 1, api=3)])
    upstream = FakeTap([req(1.0, 5, 1, api=3), req(1.0, 6, 1, api=3)])
    assert pair_connections(client, upstream) == {}            # type: ignore[arg-type]


def test_only_old_abandoned_requests_count_as_timeouts() -> None:
    tap = FakeTap(conns=[
        WireConnection(1, "hop", 0.0, 5.0, "client", ((10, 0.01),)),     # bootstrap retired: fine
        WireConnection(2, "hop", 0.0, 9.0, "client", ((0, 5.0),)),       # a Produce waited 5 s
        WireConnection(3, "hop", 0.0, 9.0, "client", ((1, 3.0),)),       # a long-poll Fetch
        WireConnection(4, "hop", 0.0, 9.0, "target", ((0, 5.0),)),       # the proxy closed it
    ])
    found = unanswered_closes(tap, ignore=frozenset({1}))       # type: ignore[arg-type]
    assert len(found) == 1 and found[0].startswith("connection 2 ")


def test_a_client_at_its_quota_forfeits_nothing() -> None:
    steady = [(t / 10, 10) for t in range(300)]          # 100 units/s against a quota of 100/s
    assert forfeited(steady, 100, 2.0, 5.0, 30.0) == 0.0


def test_a_pause_longer_than_the_allowance_forfeits_the_rest() -> None:
    # A burst that empties the bucket (2 s of quota), at the quota after it, then silent from 10 s to
    # 15 s: the bucket is full again at 12 s, and the 3 s after are lost; a pause of 1.5 s loses nothing.
    burst = [(0.0, 200)]
    paused = burst + [(t / 10, 10) for t in range(1, 100)] + [(15 + t / 10, 10) for t in range(100)]
    assert forfeited(paused, 100, 2.0, 5.0, 25.0) == pytest.approx(3.0, abs=0.11)
    assert forfeited(paused, 100, 2.0, 13.0, 25.0) == pytest.approx(2.0, abs=0.11)   # clipped to the span
    short = burst + [(t / 10, 10) for t in range(1, 100)] + [(11.5 + t / 10, 10) for t in range(100)]
    assert forfeited(short, 100, 2.0, 5.0, 21.0) == 0.0


def test_a_client_steadily_under_forfeits_once_its_bucket_is_full() -> None:
    # After a burst that empties the bucket, 20 s at 0.8 x the quota fill it in 10 s; 0.2 s of quota
    # a second is lost after that.
    slow = [(0.0, 200)] + [(t / 10, 8) for t in range(1, 201)]
    assert forfeited(slow, 100, 2.0, 0.0, 20.0) == pytest.approx(2.0, abs=0.15)
