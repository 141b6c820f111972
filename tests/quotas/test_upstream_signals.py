"""What an adaptive pool measures per window: latency histograms, their merge, and which answers count."""

from __future__ import annotations

import pytest

from kqp.quotas.pools.upstream_signals import (
    MAX_BUCKET,
    LatencyHistogram,
    SignalCollector,
    WindowSignals,
    bucket_of,
    bucket_value,
    counts_as_latency,
)


@pytest.mark.parametrize("seconds", [0.0012, 0.005, 0.0413, 0.1, 0.25, 1.7, 29.0])
def test_a_bucket_stands_for_its_values_within_nine_percent(seconds: float) -> None:
    # Four buckets per doubling: a bucket spans a factor 2^(1/4) = 1.189, and its geometric middle
    # is within 2^(1/8) = 1.0905 of anything in it.
    assert bucket_value(bucket_of(seconds)) == pytest.approx(seconds, rel=0.0906)


def test_buckets_start_at_one_millisecond_and_end_at_a_cap() -> None:
    assert bucket_of(0.0) == bucket_of(0.001) == 0
    # 200 ms: log2(200) * 4 = 30.58 -> bucket 30, shown as 2^(30.5/4) ms = 197.4 ms
    assert bucket_of(0.2) == 30
    assert bucket_value(30) == pytest.approx(0.19740, rel=1e-4)
    assert bucket_of(1e9) == MAX_BUCKET


def test_the_median_of_five_is_the_third_so_two_slow_samples_cannot_move_it() -> None:
    h = LatencyHistogram()
    for seconds in (0.02, 0.02, 0.02, 9.0, 30.0):
        h.record(seconds)
    assert h.total == 5
    assert h.quantile(0.5) == bucket_value(bucket_of(0.02))
    # rank ceil(0.8 * 5) = 4: the first slow one
    assert h.quantile(0.8) == bucket_value(bucket_of(9.0))
    assert LatencyHistogram().quantile(0.5) is None


def test_histograms_merge_exactly() -> None:
    samples_a, samples_b = [0.01, 0.2, 0.3], [0.05, 0.05, 2.0, 0.4]
    a, b, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    for s in samples_a:
        a.record(s)
        both.record(s)
    for s in samples_b:
        b.record(s)
        both.record(s)
    a.add(b)
    assert a == both
    assert a.total == 7
    assert a.quantile(0.5) == both.quantile(0.5) == bucket_value(bucket_of(0.2))   # 4th of 7


def test_the_collector_closes_a_window_and_starts_an_empty_one() -> None:
    c = SignalCollector()
    c.response(1, 0.04, 16_000)
    c.response(1, 0.06, 16_000, upstream_throttle_ms=30)
    c.response(2, None, 5_000)          # answered, delivered, but its time is not the broker's
    c.timeout()
    c.disconnect()
    w = c.take(0.2, stalled=0.3)
    assert w.samples == 2 and set(w.latency) == {1}
    assert w.delivered == 37_000
    assert w.delivered_rate == pytest.approx(185_000)   # 37 000 B / 0.2 s
    assert (w.throttled, w.timeouts, w.disconnects, w.stalled) == (1, 1, 1, 0.3)
    empty = c.take(0.2)
    assert (empty.samples, empty.delivered, empty.throttled, empty.timeouts, empty.disconnects) == (0, 0, 0, 0, 0)


def test_a_fleet_window_is_the_sum_of_its_processes_windows() -> None:
    one, two = SignalCollector(), SignalCollector()
    one.response(1, 0.02, 100)
    two.response(1, 0.5, 300, upstream_throttle_ms=5)
    two.response(3, 0.04, 50)
    two.timeout()
    merged = WindowSignals.merged([one.take(0.2, stalled=0.1), two.take(0.2, stalled=0.7)])
    assert merged.delivered == 450
    assert merged.latency[1].total == 2 and merged.latency[3].total == 1
    assert (merged.throttled, merged.timeouts, merged.stalled) == (1, 1, 0.7)   # the oldest stall is the fleet's
    with pytest.raises(ValueError):
        WindowSignals.merged([])


def test_which_answers_measure_the_broker() -> None:
    assert counts_as_latency(is_fetch=False, records=0, more_available=False)     # every Produce
    assert counts_as_latency(is_fetch=True, records=500, more_available=True)     # a consumer behind
    assert not counts_as_latency(is_fetch=True, records=0, more_available=False)  # waited max_wait_ms
    # records, but nothing beyond them: it may have waited for them to be produced
    assert not counts_as_latency(is_fetch=True, records=3, more_available=False)
