"""SampledRate against values worked out by hand from Kafka's Rate/SampledStat rules.

Defaults as Kafka's: window 1 s, 11 samples (12 slots with the overlapping one), samples purged
once their last event is 11 s old, rate window at least (11 - 1) full windows plus the current.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqp.quotas.rates.sampled_rate import SampledRate


def rate() -> SampledRate:
    return SampledRate(1.0, 11)


def test_first_window_counts_samples_minus_one_full_windows() -> None:
    r = rate()
    r.record(100, 0.0)
    # elapsed 0 s, 0 full windows < 10 -> W = 0 + 10 = 10 s; 100 / 10 = 10/s
    assert r.window_size(0.0) == 10.0
    assert r.measure(0.0) == 10.0
    # half way through the first window: W = 0.5 + 10 = 10.5 s
    assert r.window_size(0.5) == 10.5
    assert r.measure(0.5) == pytest.approx(100 / 10.5)
    r.record(100, 0.5)  # same sample: 0.5 - 0 < 1
    assert r.measure(0.5) == pytest.approx(200 / 10.5)
    # at 1.0 the first sample is complete: the record opens sample 2, starting at 1.0.
    # elapsed 1 s = 1 full window < 10 -> W = 1 + 9 = 10 s; total 250 -> 25/s
    r.record(50, 1.0)
    assert r.window_size(1.0) == 10.0
    assert r.measure(1.0) == 25.0


def test_full_span_then_rotation() -> None:
    r = rate()
    for t in range(11):  # 10 units at t = 0, 1, ..., 10: eleven samples
        r.record(10, float(t))
    # oldest sample starts at 0: elapsed 10 s = 10 full windows, no padding; 110 / 10 = 11/s
    assert r.window_size(10.0) == 10.0
    assert r.measure(10.0) == 11.0
    assert r.measure(10.5) == pytest.approx(110 / 10.5)
    r.record(10, 11.0)  # the twelfth slot (the overlapping one) comes into use
    # purge at 11.0: the t=0 sample's last event is 11.0 - 0 = 11 >= 11 s old -> reset.
    # Left: t=1..11, 110 units, oldest start 1 -> W = 10 s -> 11/s
    assert r.measure(11.0) == 11.0
    r.record(10, 12.0)  # rotates into the slot of the purged t=0 sample
    # purge at 12.0 drops the t=1 sample; t=2..12 = 11 samples = 110 over W = 12 - 2 = 10 s
    assert r.window_size(12.0) == 10.0
    assert r.measure(12.0) == 11.0


def test_steady_rate_reads_kafka_s_overlapping_estimate() -> None:
    # 5 units every 0.5 s (10/s) for 30 s: the monitored samples hold 11 windows of which the
    # oldest began up to 1 s before the span, so Kafka's estimate stays within [10, 11]/s.
    r = rate()
    t = 0.0
    while t < 30.0:
        r.record(5, t)
        t += 0.5
    assert 10.0 <= r.measure(29.75) <= 11.0


def test_idle_entity_is_purged() -> None:
    r = rate()
    r.record(1000, 0.0)
    # at 10.75: elapsed 10.75 s (10 full windows, no padding) -> 1000 / 10.75
    assert r.measure(10.75) == pytest.approx(1000 / 10.75)
    # at 11.0 the only sample's last event is 11 s old: purged, the rate is 0
    assert r.measure(11.0) == 0.0
    # the purged sample restarts at 11.0: the window is back to the first-window rule
    assert r.window_size(11.0) == 10.0
    r.record(100, 11.0)
    assert r.measure(11.0) == 10.0


def test_partial_purge_pads_missing_windows() -> None:
    r = rate()
    r.record(100, 0.0)
    r.record(100, 5.0)  # second sample, starts at 5.0
    # at 11.0 the t=0 sample is purged; the t=5 one (6 s old) stays. elapsed 11 - 5 = 6 s,
    # 6 full windows < 10 -> W = 6 + 4 = 10 s; 100 / 10 = 10/s
    assert r.window_size(11.0) == 10.0
    assert r.measure(11.0) == 10.0


def test_sample_overlapping_the_span_makes_window_longer_than_span() -> None:
    r = rate()
    r.record(100, 0.0)
    r.record(100, 0.75)  # same sample, last event 0.75
    # at 11.5 the sample is 10.75 s past its last event: kept. W = 11.5 - 0 = 11.5 s
    assert r.window_size(11.5) == 11.5
    assert r.measure(11.5) == pytest.approx(200 / 11.5)


def test_window_floor_of_one_millisecond() -> None:
    r = SampledRate(1.0, 1)  # one sample: no padding windows at all
    r.record(5, 0.0)
    # elapsed 0 -> Kafka's floor of 1 ms
    assert r.window_size(0.0) == 0.001
    assert r.measure(0.0) == pytest.approx(5000.0)
    assert r.measure(0.5) == pytest.approx(10.0)


def test_measure_on_fresh_rate_is_zero_and_starts_a_sample() -> None:
    r = rate()
    assert r.measure(3.0) == 0.0
    # Kafka's oldest() created a sample at 3.0; a record at 3.5 lands in it
    r.record(10, 3.5)
    assert r.window_size(3.5) == 10.5


def test_negative_record_unrecords() -> None:
    r = rate()
    r.record(100, 0.0)
    r.record(-100, 0.25)
    assert r.measure(0.25) == 0.0


def test_observe_matches_measure_and_window_size() -> None:
    r = rate()
    r.record(30, 0.0)
    r.record(30, 2.0)
    # elapsed 2.5 s = 2 full windows < 10 -> W = 2.5 + 8 = 10.5 s
    assert r.observe(2.5) == (60 / 10.5, 10.5)
    assert r.observe(2.5) == (r.measure(2.5), r.window_size(2.5))


@pytest.mark.parametrize("size, count", [(0.0, 11), (1.0, 0), (-1.0, 3)])
def test_bad_configuration(size: float, count: int) -> None:
    with pytest.raises(ValueError):
        SampledRate(size, count)


@settings(max_examples=120, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(-50.0, 400.0)), min_size=1, max_size=60),
       limit=st.floats(1.0, 200.0), count=st.integers(1, 11))
def test_surely_below_is_only_said_where_measuring_agrees_and_would_purge_nothing(
        steps: list[tuple[float, float]], limit: float, count: int) -> None:
    # Records (negative ones are refunds) at random gaps; whenever the shortcut says "below", a
    # measurement of a copy must say the rate is at most the limit and leave every sample as it was.
    def recorded(upto: int) -> tuple[SampledRate, float]:
        # The same rate again, by the same steps: a copy that also holds for compiled classes.
        rate, now = SampledRate(1.0, count), 0.0
        for gap, value in steps[:upto]:
            now += gap
            rate.record(value, now)
            if not rate.surely_below(limit, now):
                rate.measure(now)   # as a sensor measures when the shortcut cannot answer
        return rate, now

    for i in range(1, len(steps) + 1):
        rate, now = recorded(i)
        if rate.surely_below(limit, now):
            before = list(rate._data)
            assert rate.measure(now) <= limit
            assert list(rate._data) == before
