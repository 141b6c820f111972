"""KIP-599's token bucket, with the KIP's worked example."""

from __future__ import annotations

import pytest

from kqp.quotas.rates.token_bucket import TokenBucket


def kip599_bucket() -> TokenBucket:
    # Q = 5 mutations/s, S = 100 windows of W = 1 s: R = Q = 5, B = Q * S * W = 500
    return TokenBucket(rate=5.0, burst=5.0 * 100 * 1.0, now=0.0)


def test_kip599_example() -> None:
    b = kip599_bucket()
    assert b.tokens(0.0) == 500.0  # a new bucket starts full
    # 7 topics x 80 partitions = 560 mutations at T: admitted (tokens may go negative)
    b.record(560, 0.0)
    assert b.tokens(0.0) == -60.0
    # throttle -K / R = 60 / 5 = 12 s
    assert b.throttle_seconds(0.0) == 12.0
    # after 6 s: K = -60 + 6 * 5 = -30 -> 6 s to go
    assert b.tokens(6.0) == -30.0
    assert b.throttle_seconds(6.0) == 6.0
    # after 12 s the bucket is back to 0 tokens: no throttle, the next mutation is admitted
    assert b.tokens(12.0) == 0.0
    assert b.throttle_seconds(12.0) == 0.0


def test_refill_stops_at_the_burst() -> None:
    b = kip599_bucket()
    b.record(100, 0.0)  # 400 left
    assert b.tokens(10.0) == 450.0  # + 10 s * 5
    assert b.tokens(1000.0) == 500.0  # capped at B


def test_negative_record_gives_back_at_most_the_burst() -> None:
    b = kip599_bucket()
    b.record(-50, 0.0)
    assert b.tokens(0.0) == 500.0
    b.record(100, 0.0)
    b.record(-30, 0.0)
    assert b.tokens(0.0) == 430.0


# A quota change, as Kafka makes it: ClientQuotaManager.updateQuotaMetricConfigs swaps the
# metric's config and leaves the TokenBucket's tokens and lastUpdateMs as they are; its next
# refill reads the new quota, so it credits `new rate x (now - lastUpdateMs)` and caps at the new
# burst Q x S x W.

def test_raised_rate_refills_the_time_since_the_last_touch_at_the_new_rate() -> None:
    b = kip599_bucket()
    b.record(560, 0.0)  # K = 500 - 560 = -60, last touched at 0
    # Q 5 -> 10 at t = 4 (B = 10 x 100 x 1 = 1000): the 4 s since the last touch refill at the
    # new rate, K = -60 + 4 x 10 = -20; throttle -K / R = 20 / 10 = 2 s (not 4 s at the old rate).
    b.update_rate(10.0, 1000.0)
    assert b.tokens(4.0) == -20.0
    assert b.throttle_seconds(4.0) == 2.0
    assert (b.rate, b.burst) == (10.0, 1000.0)


def test_a_touch_before_the_change_settles_at_the_old_rate() -> None:
    b = kip599_bucket()
    b.record(560, 0.0)
    # A read at t = 4 (a record, or a metrics scrape measuring the bucket) refills at 5/s:
    # K = -60 + 4 x 5 = -40, last touched at 4.
    assert b.tokens(4.0) == -40.0
    b.update_rate(10.0, 1000.0)
    # Only t = 4 -> 5 refills at 10/s: K = -40 + 10 = -30, throttle 30 / 10 = 3 s.
    assert b.tokens(5.0) == -30.0
    assert b.throttle_seconds(5.0) == 3.0


def test_a_raised_burst_is_not_filled() -> None:
    b = kip599_bucket()
    assert b.tokens(0.0) == 500.0  # full at Q = 5
    b.update_rate(10.0, 1000.0)
    # the new burst is room to refill into, not a gift: 500 now, 500 + 20 x 10 = 700 at t = 20,
    # and the burst of 1000 at t = 50
    assert b.tokens(0.0) == 500.0
    assert b.tokens(20.0) == 700.0
    assert b.tokens(50.0) == b.tokens(80.0) == 1000.0


def test_a_lowered_burst_cuts_the_tokens_and_a_debt_stays() -> None:
    b = kip599_bucket()
    b.update_rate(1.0, 100.0)  # Q 5 -> 1: B = 1 x 100 x 1 = 100, the 500 tokens are cut to 100
    assert b.tokens(0.0) == 100.0
    b.record(160, 0.0)  # K = -60
    # lowering further keeps the debt and repays it more slowly: 60 / 0.5 = 120 s
    b.update_rate(0.5, 50.0)
    assert b.tokens(0.0) == -60.0
    assert b.throttle_seconds(0.0) == 120.0


def test_clock_stepping_back_does_not_drain_or_fill() -> None:
    b = kip599_bucket()
    b.record(100, 10.0)  # 400
    assert b.tokens(9.0) == 400.0
    assert b.tokens(10.0) == 400.0


def test_zero_rate_never_refills() -> None:
    b = TokenBucket(0.0, 0.0, 0.0)
    b.record(1, 0.0)
    assert b.tokens(1e6) == -1.0
    assert b.throttle_seconds(1e6) == float("inf")


@pytest.mark.parametrize("rate, burst", [(-1.0, 1.0), (1.0, -1.0), (float("nan"), 1.0)])
def test_bad_configuration(rate: float, burst: float) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate, burst, 0.0)


def test_spend_is_record_then_tokens() -> None:
    spent, recorded = TokenBucket(10.0, 50.0, 0.0), TokenBucket(10.0, 50.0, 0.0)
    for now, value in ((0.0, 30.0), (0.5, 40.0), (0.5, -100.0), (3.0, 5.0), (2.0, 1.0)):   # the last steps back
        recorded.record(value, now)
        assert spent.spend(value, now) == recorded.tokens(now)
