"""Throttle arithmetic (QuotaUtils) and KIP-124 co-existence, with the KIPs' own numbers."""

from __future__ import annotations

import pytest

from kqp.quotas.model import Principal, QuotaKey, QuotaType
from kqp.quotas.rates.throttle import (
    CAPPED_TYPES,
    INT32_MAX,
    Throttle,
    Violation,
    capped,
    combine,
    decide,
    throttle_ms,
    throttle_seconds,
)

MB = 1024 * 1024
KEY = QuotaKey("alice", "")


def test_kip13_byte_rate_example() -> None:
    # quota T = 10 MB/s, observed O = 12 MB/s over W = 10 s:
    # X = (12 - 10) / 10 * 10 = 2 s, and indeed 12 * 10 / (10 + 2) = 10
    x = throttle_seconds(12 * MB, 10 * MB, 10.0)
    assert x == pytest.approx(2.0)
    assert 12 * MB * 10.0 / (10.0 + x) == pytest.approx(10 * MB)


def test_kip599_sampled_rate_example() -> None:
    # Q = 5/s, S * W = 100 s, a burst of 560 reads R = 5.6/s: (5.6 - 5) / 5 * 100 = 12 s
    assert throttle_seconds(5.6, 5.0, 100.0) == pytest.approx(12.0)


def test_within_quota_is_zero() -> None:
    assert throttle_seconds(10.0, 10.0, 10.0) == 0.0
    assert throttle_seconds(3.0, 10.0, 10.0) == 0.0


def test_zero_bound_is_refused() -> None:
    with pytest.raises(ValueError):
        throttle_seconds(1.0, 0.0, 10.0)


def test_byte_rate_is_uncapped_request_quota_capped_at_one_window() -> None:
    # KIP-124: request quota 50% over W = 10 s, observed 150%: X = (150 - 50) / 50 * 10 = 20 s,
    # but a request quota throttles at most one window (1 s).
    x = throttle_seconds(150.0, 50.0, 10.0)
    assert x == 20.0
    assert capped(x, 1.0) == 1.0
    assert capped(0.25, 1.0) == 0.25
    assert CAPPED_TYPES == {"request_percentage", "request_rate"}
    assert "producer_byte_rate" not in CAPPED_TYPES


def test_combine_takes_the_largest_throttle() -> None:
    # KafkaApis: max(bandwidth, request); the client waits once, for the longer of the two.
    vs = [Violation("producer_byte_rate", 2.0, KEY), Violation("request_percentage", 1.0, KEY)]
    assert combine(vs) == (2.0, "producer_byte_rate")
    vs = [Violation("producer_byte_rate", 0.5, KEY), Violation("request_rate", 1.0, KEY)]
    assert combine(vs) == (1.0, "request_rate")


def test_combine_ties_go_to_the_request_quota() -> None:
    # KafkaApis throttles under the byte quota only when bandwidth > request: ties go to request.
    vs = [Violation("consumer_byte_rate", 1.0, KEY), Violation("request_percentage", 1.0, KEY)]
    assert combine(vs) == (1.0, "request_percentage")
    vs = [Violation("controller_mutation_rate", 1.0, KEY), Violation("request_rate", 1.0, KEY)]
    assert combine(vs) == (1.0, "request_rate")


def test_combine_of_nothing() -> None:
    assert combine([]) == (0.0, None)
    assert combine([Violation("producer_byte_rate", 0.0, KEY)]) == (0.0, None)


# throttle_time_ms: Kafka's Math.round(double) on milliseconds, half up; a throttle rounding to 0
# is no throttle (ClientQuotaManager.throttle acts only when throttleTimeMs > 0).
@pytest.mark.parametrize("seconds, expected", [
    (0.0004, 0),       # 0.4 ms rounds to 0: not throttled, not muted
    (0.0005, 1),       # 0.5 ms: half up gives 1 (Python's round(0.5) would give 0)
    (0.0014995, 1),    # 1.4995 ms: 1, rounded once, not via 1.5
    (0.0015, 2),       # 1.5 ms: 2
    (0.0025, 3),       # 2.5 ms: 3, half up, not half to even (round(2.5) == 2)
    (0.0, 0),
    (4.5, 4500),
    (-0.0005, 0),      # a negative throttle is none (Math.round(-0.5) is 0 as well)
    (-3.0, 0),
    (float("nan"), 0),  # Math.round(NaN) is 0
])
def test_throttle_ms_rounds_half_up(seconds: float, expected: int) -> None:
    assert throttle_ms(seconds) == expected
    assert isinstance(throttle_ms(seconds), int)


def test_throttle_ms_is_capped_at_int32_max() -> None:
    # Kafka's Long.toInt would wrap; the INT32 field can say at most 2^31 - 1 ms (~24.9 days).
    assert INT32_MAX == 2_147_483_647
    assert throttle_ms(1e12) == INT32_MAX
    assert throttle_ms(float("inf")) == INT32_MAX
    assert throttle_ms(2_147_483.646) == 2_147_483_646
    assert throttle_ms(2_147_483.6475) == INT32_MAX  # 2147483647.5 ms: rounds past the cap


def test_decide_is_one_value_what_to_tell_until_when_to_mute_and_why() -> None:
    # Several quotas on one request decided at t = 100 s: the largest throttle wins (KIP-124), rounded
    # to Kafka's whole milliseconds, and the mute lasts exactly what is told: until 100 + 2.3456 -> 2346 ms.
    p = Principal("alice", "c")
    found = decide([Violation(QuotaType.PRODUCER_BYTE_RATE, 2.3456, KEY),
                    Violation(QuotaType.REQUEST_RATE, 1.0, KEY)], p, 100.0)
    assert found == Throttle(2346, 102.346, p, QuotaType.PRODUCER_BYTE_RATE)
    assert decide([Violation(QuotaType.PRODUCER_BYTE_RATE, 0.0004, KEY)], p, 100.0) is None   # rounds to 0 ms
    assert decide([], p, 100.0) is None


def test_decide_paces_only_a_blind_client_with_pacing_on_and_a_shorter_pace() -> None:
    p = Principal("alice", "c")
    over = [Violation(QuotaType.PRODUCER_BYTE_RATE, 3.0, KEY, pace_seconds=0.25)]
    paced = decide(over, p, 0.0, blind=True, pacing=True)
    assert paced is not None and paced.paced and (paced.ms, paced.until) == (250, 0.25)
    for blind, pacing in ((False, True), (True, False)):
        plain = decide(over, p, 0.0, blind=blind, pacing=pacing)
        assert plain is not None and not plain.paced and plain.ms == 3000
    debt = decide([Violation(QuotaType.PRODUCER_BYTE_RATE, 3.0, KEY)], p, 0.0, blind=True, pacing=True)
    assert debt is not None and debt.ms == 3000   # no pace: a steady quota's debt is never shortened


def test_decide_marks_an_observed_decision_and_carries_the_enforced_one() -> None:
    p = Principal("alice", "c")
    both = decide([Violation(QuotaType.PRODUCER_BYTE_RATE, 5.0, KEY, observed=True),
                   Violation(QuotaType.REQUEST_RATE, 0.5, KEY)], p, 10.0)
    assert both is not None and both.observed and both.ms == 5000
    assert both.acted == Throttle(500, 10.5, p, QuotaType.REQUEST_RATE)
    alone = decide([Violation(QuotaType.PRODUCER_BYTE_RATE, 5.0, KEY, observed=True)], p, 10.0)
    assert alone is not None and alone.observed and alone.acted is None   # counted, nothing acted on
