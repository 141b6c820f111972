"""The adaptive budget's control law, window by window, with its arithmetic in the comments.

Every law here has ceiling 10 MB/s, floor 100 kB/s and target 100 ms, and is updated every 0.2 s.
Latencies are reported as their histogram bucket's middle (pools/upstream_signals.py): `shown(ms)`.
"""

from __future__ import annotations

import json
import math

import pytest

from kqp.quotas.pools.adaptive_law import AdaptiveBudget, BudgetChange, Reason, adaptive_floor
from kqp.quotas.pools.upstream_signals import LatencyHistogram, WindowSignals, bucket_of, bucket_value

CEILING, FLOOR, TARGET, W = 10_000_000.0, 100_000.0, 0.1, 0.2
FLAT_OUT = CEILING   # demand of members that want everything


def shown(ms: float) -> float:
    return bucket_value(bucket_of(ms / 1000))


def window(*latencies_ms: float, delivered: float = 0.0, broker: int = 1, **signals: float) -> WindowSignals:
    """A window with these latency samples on `broker` and `delivered` bytes/s answered."""
    h = LatencyHistogram()
    for ms in latencies_ms:
        h.record(ms / 1000)
    return WindowSignals(W, {broker: h} if latencies_ms else {}, delivered * W, **signals)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def tick(self) -> float:
        self.now += W
        return self.now


def slow_started(clock: Clock, delivered: float = 400_000.0) -> AdaptiveBudget:
    """A new law after 3 healthy windows: 100k -> 200k -> 400k -> 800k (doubling towards ssthresh,
    which is the ceiling until the first decrease)."""
    law = AdaptiveBudget(CEILING, FLOOR, TARGET, clock.now)
    assert law.budget == FLOOR
    for expected in (200_000, 400_000, 800_000):
        assert law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=delivered), FLAT_OUT) == expected
        assert law.reason == Reason.SLOW_START
    return law


def cut_once(clock: Clock) -> AdaptiveBudget:
    """`slow_started`, then one window at 200 ms (shown 197.4 ms) delivering 400 kB/s:
    B = min(800k, D (1 + τ/L) / 2) = 400k * (1 + 100/197.4) / 2 = 400k * 0.7533 = 301.3k."""
    law = slow_started(clock)
    law.update(clock.tick(), window(200, 200, 200, 200, 200, delivered=400_000), FLAT_OUT)
    assert law.budget == pytest.approx(400_000 * (1 + 0.1 / shown(200)) / 2)
    assert law.budget == pytest.approx(301_320, abs=10)
    return law


def test_a_new_pool_slow_starts_from_the_floor_to_the_ceiling() -> None:
    clock = Clock()
    law = slow_started(clock)
    # Each window delivers what the budget allowed: 800k -> 1.6M -> 3.2M -> 6.4M -> min(12.8M,
    # ceiling) = 10M, and no further
    for expected in (1_600_000, 3_200_000, 6_400_000, CEILING, CEILING):
        assert law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=law.budget), FLAT_OUT) == expected


def test_over_target_the_budget_lands_under_what_the_broker_delivers() -> None:
    clock = Clock()
    law = cut_once(clock)
    assert law.reason == Reason.LATENCY
    assert law.ssthresh == law.budget
    change = law.changes[-1]
    assert (change.old, change.reason, change.latency) == (800_000, Reason.LATENCY, shown(200))
    assert change.describe() == "budget 800,000 -> 301,316/s: latency over target (197 ms, target 100 ms)"


@pytest.mark.parametrize(("latency_ms", "factor"), [
    (2000, 0.525),   # (1 + 100/1974) / 2 = 0.5253: L = 20 τ cuts to about half of D
    (400, 0.625),    # (1 + 100/394.8) / 2 = 0.6266
    (120, 0.92),     # (1 + 100/117.4) / 2 = 0.9259: just over target, a small step
])
def test_the_cut_is_the_mean_of_one_and_the_gradient(latency_ms: float, factor: float) -> None:
    clock = Clock()
    law = slow_started(clock)
    law.update(clock.tick(), window(*[latency_ms] * 5, delivered=400_000), FLAT_OUT)
    assert law.budget == pytest.approx(400_000 * (1 + 0.1 / shown(latency_ms)) / 2)
    assert law.budget == pytest.approx(400_000 * factor, rel=0.01)


def test_windows_over_target_do_not_compound_while_the_queue_drains() -> None:
    clock = Clock()
    law = cut_once(clock)   # 301.3k
    # Still 150 ms (shown 139.6 ms), the broker still delivering 400k: 400k * (1 + 100/139.6) / 2 =
    # 343.3k >= B, so B holds at 301.3k instead of falling again: the queue is already draining.
    law.update(clock.tick(), window(150, 150, 150, 150, 150, delivered=400_000), FLAT_OUT)
    assert law.budget == pytest.approx(301_320, abs=10)
    assert law.reason is None
    # A cut taken from B instead would have been 301.3k * 0.858 = 258.6k.


def test_one_slow_request_among_five_does_not_move_the_budget_down() -> None:
    clock = Clock()
    law = slow_started(clock)
    law.update(clock.tick(), window(20, 20, 20, 20, 5000, delivered=400_000), FLAT_OUT)
    assert law.latency == shown(20)
    assert law.budget == 800_000   # not cut (nor raised: slow start stays within 2 D = 800k)


def test_a_sparse_window_is_topped_up_with_the_previous_windows_samples() -> None:
    clock = Clock()
    law = slow_started(clock)
    law.update(clock.tick(), window(20, 20, delivered=400_000), FLAT_OUT)
    law.update(clock.tick(), window(20, 20, delivered=400_000), FLAT_OUT)
    # One slow answer alone: topped up with the two windows before to 5 samples, 900 20 20 20 20,
    # whose median is 20 ms.
    law.update(clock.tick(), window(900, delivered=400_000), FLAT_OUT)
    assert law.latency == shown(20)
    assert law.reason != Reason.LATENCY
    # Three slow in a row are a slow broker: 900 900 900 20 20 -> median 900 ms.
    law.update(clock.tick(), window(900, 900, delivered=400_000), FLAT_OUT)
    assert law.latency == shown(900)
    assert law.reason == Reason.LATENCY


def test_the_worst_broker_sets_the_latency() -> None:
    clock = Clock()
    law = slow_started(clock)
    h1, h2 = LatencyHistogram(), LatencyHistogram()
    for _ in range(5):
        h1.record(0.02)
        h2.record(0.3)
    law.update(clock.tick(), WindowSignals(W, {1: h1, 2: h2}, 400_000 * W), FLAT_OUT)
    assert law.latency == shown(300)
    assert law.reason == Reason.LATENCY


def test_a_broker_that_answers_nothing_while_a_produce_waits_counts_as_that_slow() -> None:
    clock = Clock()
    law = slow_started(clock)   # delivered 400k in its windows
    # No answer in this window, the oldest Produce has waited 0.5 s: L = 0.5 s, D = max(400k, 0) =
    # 400k, B = 400k * (1 + 0.1/0.5) / 2 = 240k.
    law.update(clock.tick(), window(stalled=0.5), FLAT_OUT)
    assert law.reason == Reason.STALLED
    assert law.budget == pytest.approx(240_000)
    # A wait under target is no news: B holds.
    law.update(clock.tick(), window(stalled=0.05), FLAT_OUT)
    assert law.budget == pytest.approx(240_000)


def test_healthy_the_budget_grows_with_itself_and_with_the_headroom_under_target() -> None:
    clock = Clock()
    law = cut_once(clock)   # 301.3k, ssthresh 301.3k: probing from here
    # L = 20 ms (shown 20.75): headroom (100 - 20.75) / 100 = 0.7925, growth 1 + 0.15 * 0.7925 =
    # 1.1189; B = min(301.3k * 1.1189, max(B, 400k * 1.075), max(B, 1.5 * demand)) = 337.1k
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=400_000), FLAT_OUT)
    assert law.reason == Reason.PROBE
    assert law.budget == pytest.approx(301_320 * (1 + 0.15 * (0.1 - shown(20)) / 0.1), abs=20)
    # Right under target (95 ms, shown 98.7): growth 1 + 0.15 * 0.013 = 1.002, under the 1% that
    # makes an event.
    before, events = law.budget, len(law.changes)
    law.update(clock.tick(), window(95, 95, 95, 95, 95, delivered=400_000), FLAT_OUT)
    assert law.budget == pytest.approx(before * (1 + 0.15 * (0.1 - shown(95)) / 0.1))
    assert len(law.changes) == events


def test_a_probe_never_runs_more_than_seven_and_a_half_percent_ahead_of_delivery() -> None:
    clock = Clock()
    law = cut_once(clock)   # 301.3k
    # The broker now delivers only 250k. First window: D = max(400k, 250k) = 400k still, so B grows
    # to 337.1k as in the test above.
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=250_000), FLAT_OUT)
    assert law.budget == pytest.approx(337_135, abs=10)
    # Then D = 250k: B <= max(B, 250k * 1.075 = 268.8k) = B: it holds, however healthy latency looks.
    for _ in range(3):
        law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=250_000), FLAT_OUT)
        assert law.budget == pytest.approx(337_135, abs=10)


def test_an_idle_pool_decays_towards_its_demand_and_never_grows() -> None:
    clock = Clock()
    law = slow_started(clock)   # 800k
    # demand 100k: 1.5 * 100k = 150k < 800k, so idle: B = max(150k, 0.95 B)
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=100_000), 100_000)
    assert law.reason == Reason.IDLE
    assert law.budget == pytest.approx(760_000)
    # 800k * 0.95^n reaches 150k after ln(150/800) / ln(0.95) = 32.6 windows
    for _ in range(40):
        law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=100_000), 100_000)
    assert law.budget == pytest.approx(150_000)
    # No samples at all (nobody sends): still idle, still no growth.
    law.update(clock.tick(), window(), 0.0)
    assert law.budget == pytest.approx(142_500)   # max(1.5 * 0, 0.95 * 150k)
    for _ in range(20):
        law.update(clock.tick(), window(), 0.0)
    assert law.budget == FLOOR


def test_a_returning_pool_slow_starts_back_to_the_last_safe_budget() -> None:
    clock = Clock()
    law = cut_once(clock)   # 301.3k, ssthresh 301.3k
    for _ in range(30):
        law.update(clock.tick(), window(), 0.0)
    assert law.budget == FLOOR
    # Back flat out: 100k -> 200k -> min(400k, ssthresh 301.3k) -> then probing from there.
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=100_000), FLAT_OUT)
    assert law.budget == 200_000
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=200_000), FLAT_OUT)
    assert law.budget == pytest.approx(301_320, abs=10)
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=300_000), FLAT_OUT)
    assert law.reason == Reason.PROBE


def test_a_member_held_back_by_a_throttle_wants_without_bound() -> None:
    # The pool allocator reports the demand of a throttled member as unbounded (inf): the pool is
    # busy, so the budget keeps probing; only delivery and latency bound it.
    clock = Clock()
    law = cut_once(clock)   # 301.3k
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=400_000), math.inf)
    assert law.reason == Reason.PROBE
    assert law.budget == pytest.approx(337_135, abs=10)


def test_the_upstreams_own_throttle_backs_off_to_nine_tenths_of_delivery() -> None:
    clock = Clock()
    law = slow_started(clock)   # 800k, delivering 400k
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=400_000, throttled=2), FLAT_OUT)
    assert law.reason == Reason.UPSTREAM_THROTTLE
    assert law.budget == pytest.approx(360_000)   # min(800k, 0.9 * 400k)


def test_timeouts_and_disconnects_halve_the_budget_at_most_once_a_second() -> None:
    clock = Clock()
    law = slow_started(clock)   # 800k, delivering 400k
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=400_000, timeouts=3), FLAT_OUT)
    assert law.reason == Reason.TIMEOUTS
    assert law.budget == 200_000   # min(800k, 400k) / 2
    # More disconnects 0.2 .. 0.8 s later: no second cut, and no probe either.
    for _ in range(4):
        law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=400_000, disconnects=1), FLAT_OUT)
        assert law.budget == 200_000
    # 1.2 s after the first (a window without news in between): min(200k, D = 400k) / 2 = 100k = the floor
    clock.tick()
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=400_000, disconnects=1), FLAT_OUT)
    assert law.reason == Reason.DISCONNECTS
    assert law.budget == FLOOR


def test_a_slow_start_never_runs_more_than_twice_ahead_of_delivery() -> None:
    clock = Clock()
    law = slow_started(clock)   # 800k = 2 x 400k delivered
    # Healthy and wanted, but the broker delivers 300k: B <= max(B, 2 * D) with D = max(400k, 300k).
    law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=300_000), FLAT_OUT)
    assert law.budget == 800_000
    assert law.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=600_000), FLAT_OUT) == 1_200_000


def test_the_floor_bounds_every_cut() -> None:
    clock = Clock()
    law = slow_started(clock)   # 800k, delivering 400k
    # 2 s (shown 1974 ms) and 50k delivered: D = max(400k, 50k) = 400k, 400k * 0.5253 = 210.1k
    law.update(clock.tick(), window(2000, 2000, 2000, 2000, 2000, delivered=50_000), FLAT_OUT)
    assert law.budget == pytest.approx(400_000 * (1 + 0.1 / shown(2000)) / 2)
    # again: D = 50k, 50k * 0.5253 = 26.3k, held at the floor
    law.update(clock.tick(), window(2000, 2000, 2000, 2000, 2000, delivered=50_000), FLAT_OUT)
    assert law.budget == FLOOR
    assert law.ssthresh == FLOOR


def test_a_reload_clamps_the_budget_into_its_new_bounds() -> None:
    clock = Clock()
    law = slow_started(clock)   # 800k
    law.reconfigure(clock.now, ceiling=500_000, floor=50_000, target_latency=0.2)
    assert (law.budget, law.ssthresh, law.target) == (500_000, 500_000, 0.2)
    assert law.changes[-1].reason == Reason.RECONFIGURED
    state = law.state()
    assert (state.effective, state.ceiling, state.floor, state.target) == (500_000, 500_000, 50_000, 0.2)
    with pytest.raises(ValueError):
        law.reconfigure(clock.now, ceiling=500_000, floor=0, target_latency=0.2)


def test_the_floor_is_min_budget_else_the_min_shares_else_one_percent() -> None:
    assert adaptive_floor(CEILING, 0.3, 20_000) == 20_000         # min_budget wins
    assert adaptive_floor(CEILING, 0.3) == pytest.approx(3_000_000)   # 0.3 * 10M
    assert adaptive_floor(CEILING) == 100_000                     # 1% of 10M
    assert adaptive_floor(CEILING, 0.0, 50_000_000) == CEILING    # never above the ceiling
    assert adaptive_floor(CEILING, 0.0, 0.0) == 100_000           # 0 would block: the default
    with pytest.raises(ValueError):
        AdaptiveBudget(CEILING, 0.0, TARGET, 0.0)


def test_a_snapshot_carries_everything_the_next_windows_depend_on() -> None:
    clock = Clock()
    law = cut_once(clock)
    law.update(clock.tick(), window(20, 20, delivered=350_000, timeouts=1), FLAT_OUT)
    copy = AdaptiveBudget(CEILING, FLOOR, TARGET, 0.0)
    copy.restore(clock.now, json.loads(json.dumps(law.snapshot())))   # as a fleet's store keeps it
    assert copy.changes[-1].reason == law.reason
    # A sparse window topped up from the restored history (900 20 20 20 20: healthy) whose probe is
    # capped by the restored delivery (D = max(350k, 100k)), a disconnect within the restored hold, ...
    for w in (window(900, delivered=100_000), window(20, 20, 20, delivered=300_000, disconnects=1),
              window(20, 20, 20, 20, 20, delivered=300_000)):
        now = clock.tick()
        assert copy.update(now, w, FLAT_OUT) == law.update(now, w, FLAT_OUT)
        assert (copy.latency, copy.ssthresh, copy.reason) == (law.latency, law.ssthresh, law.reason)


def test_a_snapshot_keeps_the_level_a_slow_start_regains() -> None:
    clock = Clock()
    law = cut_once(clock)   # 301.3k, ssthresh 301.3k
    for _ in range(10):
        law.update(clock.tick(), window(), 0.0)   # idle: 301.3k * 0.95^10 = 180.4k
    copy = AdaptiveBudget(CEILING, FLOOR, TARGET, 0.0)
    copy.restore(clock.now, json.loads(json.dumps(law.snapshot())))
    # Back flat out: min(2 * 180.4k, ssthresh 301.3k, max(B, 2 * 300k)) = 301.3k, not 360.8k.
    assert copy.update(clock.tick(), window(20, 20, 20, 20, 20, delivered=300_000), FLAT_OUT) == pytest.approx(
        301_320, abs=10)


@pytest.mark.parametrize("reason", list(Reason))
def test_every_cause_reads_as_words_in_kqp_explain(reason: Reason) -> None:
    text = BudgetChange(1.0, 200_000, 100_000, reason, None, 0.1).describe()
    assert text.startswith("budget 200,000 -> 100,000/s: ") and text.endswith("(no sample, target 100 ms)")
