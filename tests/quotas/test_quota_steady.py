"""`algorithm: steady`, the config file's default: a token bucket holding Kafka's first allowance.

The arithmetic, with T = 1000 B/s and Kafka's default windows (1 s x 11): the bucket holds Kafka's
first allowance, (11 - 1) x 1 s x T = 10000 B, refills at T, and may go below 0 (a request of any
size is recorded); the throttle is the debt over T, ``-K / T``, and of it all but one window is what
a request charged when it is read waits before it goes (`hold`). Nothing is forgotten when samples
expire, so the rate after the first allowance is the quota over any span, which Kafka's sampled rate
is not (its sawtooth, shown side by side).
"""

from __future__ import annotations

import pytest
from helpers.quota_analysis import cumulative_slope
from hypothesis import given, settings
from hypothesis import strategies as st

from kqp.config import quota_settings_from
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import SAMPLED, STEADY, TOKEN_BUCKET, EntitySpec, Principal, QuotaSettings
from kqp.quotas.rates.sensor import QuotaSensor
from kqp.quotas.rates.throttle import combine

T = 1000.0
P = Principal("ANONYMOUS", "job")
JOB = EntitySpec(None, "job")


def manager(algorithm: str = STEADY, window_count: int = 11, **quotas: float) -> QuotaManager:
    return QuotaManager(QuotaSettings(1.0, window_count, {JOB: quotas or {"producer_byte_rate": T}},
                                      algorithm=algorithm), 0.0)


def test_the_config_files_default_is_steady_and_kafkas_arithmetic_is_a_setting_away() -> None:
    assert quota_settings_from({}).algorithm == STEADY
    assert quota_settings_from({"algorithm": "sampled"}).algorithm == SAMPLED
    assert QuotaSettings().algorithm == SAMPLED   # built in code: Kafka's, as the engine's tests state it


def test_kafkas_first_allowance_then_the_debt_over_the_quota() -> None:
    m = manager()
    assert m.record_produce(P, 10_000, 1, 1, 0.0) == []          # the allowance: 10 windows of T, K = 0
    [v] = m.record_produce(P, 500, 1, 1, 0.0)                     # K = -500: 0.5 s
    assert (v.throttle_seconds, v.pace_seconds) == (0.5, None)    # the debt: no request may skip it
    [v] = m.record_produce(P, 2000, 1, 1, 0.0)                    # K = -2500: 2.5 s, the whole debt
    assert v.throttle_seconds == 2.5
    [v] = m.record_produce(P, 1000, 1, 1, 2.5)                    # paid: K = 0, then -1000
    assert v.throttle_seconds == pytest.approx(1.0)


def test_an_idle_key_refills_to_the_allowance_and_no_further() -> None:
    m = manager()
    m.record_produce(P, 12_000, 1, 1, 0.0)                        # K = -2000
    assert m.record_produce(P, 10_000, 1, 1, 100.0) == []         # refilled to 10000, not beyond
    assert combine(m.record_produce(P, 1, 1, 1, 100.0))[0] == pytest.approx(0.001)


def flat_out(algorithm: str, seconds: float = 120.0, request: float = 100.0) -> list[tuple[float, int]]:
    """One client sending `request` bytes each time its throttle has passed (as a client that backs off
    does, or a muted one is read): (time, bytes) of every request."""
    m, now, events = manager(algorithm), 0.0, []
    while now < seconds:
        events.append((now, int(request)))
        now += max(combine(m.record_produce(P, int(request), 1, 1, now))[0], 0.005)
    return events


def thirty_second_rates(events: list[tuple[float, int]]) -> list[float]:
    """The rate over every 30 s span after the first one (11 s), in 2 s steps, in quotas."""
    return [cumulative_slope(events, start, start + 30) / T for start in range(11, 90, 2)]


def test_after_the_allowance_every_30_s_span_holds_the_quota_where_the_sampled_rate_saws() -> None:
    steady = thirty_second_rates(flat_out(STEADY))
    assert min(steady) > 0.999 and max(steady) < 1.001, (min(steady), max(steady))
    # Kafka's: ten windows' worth let through each time a burst's sample expires, then next to nothing
    # until the next expiry; a 30 s span holds two or three such teeth (0.92-1.02 here).
    sampled = thirty_second_rates(flat_out(SAMPLED))
    assert min(sampled) < 0.95, (min(sampled), max(sampled))


def test_a_capped_request_quota_repays_its_debt_and_forgives_past_a_span() -> None:
    """request_rate 10/s over 2 windows of 1 s: the allowance is one window, 10 requests. 15 more at
    once owe 1.5 s, capped at one window (KIP-124): the debt stays, so the next requests pay it back
    a window at a time. Owing more than a span's worth (2 s), the rest is forgiven."""
    m = manager(window_count=2, request_rate=10)
    for _ in range(10):
        assert m.record_request(P, 0.0, 0.0) == []
    throttles = [combine(m.record_request(P, 0.0, 0.0))[0] for _ in range(15)]
    assert throttles[-1] == 1.0 and max(throttles) == 1.0
    # At 1.0 s, K = -15 + 10 = -5: the next request owes 0.6 s, its own and what the cap left.
    assert combine(m.record_request(P, 0.0, 1.0))[0] == pytest.approx(0.6)
    for _ in range(20):   # K = -26 at 1.0 s: 2.6 s owed, past the span: forgiven to 2 s
        m.record_request(P, 0.0, 1.0)
    assert combine(m.record_request(P, 0.0, 3.0))[0] == pytest.approx(0.1)   # K = -20 + 20 - 1


def test_a_reload_to_another_algorithm_restarts_the_sensor_and_a_new_limit_keeps_the_debt() -> None:
    m = manager()
    m.record_produce(P, 12_000, 1, 1, 0.0)                        # K = -2000
    m.update_settings(QuotaSettings(1.0, 11, {JOB: {"producer_byte_rate": 2 * T}}, algorithm=STEADY), 0.0)
    # The debt is kept and repaid at the new rate; the allowance is 10 windows of the new quota.
    assert combine(m.record_produce(P, 0, 1, 1, 0.0))[0] == pytest.approx(1.0)
    lines = m.update_settings(QuotaSettings(1.0, 11, {JOB: {"producer_byte_rate": 2 * T}},
                                            algorithm=TOKEN_BUCKET), 0.0)
    assert lines[-1] == "restarted 1 sensor(s) whose algorithm changed"
    assert m.record_produce(P, 22_000, 1, 1, 0.0) == []           # KIP-599's burst: 11 windows


def test_a_steady_consumer_quota_caps_a_fetch_at_its_tokens_and_one_window() -> None:
    """Kafka's cap, the allowance (10 windows of T), bounds a fresh consumer's Fetch; back from a
    throttle it asks for what it has in tokens and one window more, so its bytes follow the line."""
    m = manager(consumer_byte_rate=T)
    assert m.fetch_max_bytes_cap(P, 0.0) == 10_000
    m.record_fetch(P, 10_000, 1, 1, 0.0)                          # K = 0
    assert m.fetch_max_bytes_cap(P, 0.0) == 1000
    m.record_fetch(P, 1000, 1, 1, 0.0)                            # K = -1000: throttled 1 s
    assert m.fetch_max_bytes_cap(P, 0.5) == 1000                  # still in debt: a window's worth
    assert m.fetch_max_bytes_cap(P, 4.0) == 4000                  # K = 3000, and a window
    assert m.fetch_max_bytes_cap(P) == 10_000                     # no time given: Kafka's


def test_an_observed_quota_keeps_no_more_than_a_spans_debt() -> None:
    # Observed, nothing holds the client back: flat out at 3 T for 60 s it would owe 120 s. Kept to
    # one span's worth (11 s at 1 s x 11), a switch to enforced throttles it for a span at most, as
    # the sampled rate, which remembers a span, would.
    settings = QuotaSettings(1.0, 11, {JOB: {"producer_byte_rate": T}}, algorithm=STEADY, mode="observe")
    m = QuotaManager(settings, 0.0)
    told = []
    for step in range(1, 601):
        told += [v.throttle_seconds for v in m.record_produce(P, int(3 * T / 10), 1, 1, step / 10)]
    assert max(told) == pytest.approx(11.0)
    m.update_settings(QuotaSettings(1.0, 11, {JOB: {"producer_byte_rate": T}}, algorithm=STEADY), 60.0)
    [after] = m.record_produce(P, 1, 1, 1, 60.0)
    assert not after.observed and after.throttle_seconds == pytest.approx(11.0, abs=0.01)
    assert not m.record_produce(P, 1, 1, 1, 71.1)   # repaid one span later


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0.0, 2.0), st.floats(-5.0, 30.0)), min_size=1, max_size=40),
       algorithm=st.sampled_from([STEADY, SAMPLED, TOKEN_BUCKET]), capped=st.booleans())
def test_a_charge_is_its_recording_then_its_check(steps: list[tuple[float, float]], algorithm: str,
                                                   capped: bool) -> None:
    # `charge` takes a shortcut for a local bucket within its quota: it must give what recording and
    # then checking give, the throttle, the tokens and the last throttle alike.
    def sensor() -> QuotaSensor:
        return QuotaSensor(5.0, 1.0, 11, 0.0, cap=1.0 if capped else None, algorithm=algorithm)

    charged, stepped, now = sensor(), sensor(), 0.0
    for gap, value in steps:
        now += gap
        stepped.add(value, now)
        assert charged.charge(value, now) == stepped.throttle(now)
        assert (charged.tokens(now), charged.last_throttle, charged.measure(now)) == \
            (stepped.tokens(now), stepped.last_throttle, stepped.measure(now))
