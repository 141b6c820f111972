"""KIP-599's token bucket, with the KIP's worked example."""

from __future__ import annotations

import pytest

from kqp.quotas.token_bucket import TokenBucket


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


def test_update_rate_settles_at_the_old_rate_first() -> None:
    b = kip599_bucket()
    b.record(560, 0.0)  # -60
    # 4 s at 5/s: -40; then 10/s with burst 1000
    b.update_rate(10.0, 1000.0, 4.0)
    assert b.tokens(4.0) == -40.0
    assert b.throttle_seconds(4.0) == 4.0  # 40 / 10
    assert b.tokens(5.0) == -30.0
    # lowering the burst clamps accumulated tokens
    b.update_rate(10.0, 20.0, 100.0)
    assert b.tokens(100.0) == 20.0
    assert (b.rate, b.burst) == (10.0, 20.0)


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
