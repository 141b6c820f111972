"""`algorithm: token_bucket` for every quota type: KIP-599's bucket, its throttles, reloads, and why.

Unless a test says otherwise: window 1 s x 11, so a bucket of rate Q holds a burst of 11 Q.
"""

from __future__ import annotations

import pytest

from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import SAMPLED, TOKEN_BUCKET, EntitySpec, Principal, QuotaKey, QuotaSettings
from kqp.quotas.rates.throttle import throttle_ms

ALICE = Principal("alice", "app")
ALICE_ENTITY = EntitySpec("alice", None)
T = "producer_byte_rate"


def bucket_manager(algorithm: str = TOKEN_BUCKET, **quotas: float) -> QuotaManager:
    return QuotaManager(QuotaSettings(entities={ALICE_ENTITY: quotas}, algorithm=algorithm), now=0.0)


def test_byte_rate_bucket_throttles_minus_tokens_over_q() -> None:
    m = bucket_manager(producer_byte_rate=1000)
    # The bucket starts full at B = 1000 x 11 x 1 = 11000: 11000 B at once leave K = 0, no throttle.
    assert m.record_produce(ALICE, 11000, 1, 1, 0.0) == []
    # +2000 B at t=0: K = -2000, throttle -K/Q = 2 s (uncapped: a byte rate).
    [v] = m.record_produce(ALICE, 2000, 1, 1, 0.0)
    assert (v.quota_type, v.key, v.throttle_seconds) == (T, QuotaKey("alice", ""), pytest.approx(2.0))
    # At t=2.5 the refill has brought K to -2000 + 2500 = 500: 500 B leave K = 0, no throttle.
    assert m.record_produce(ALICE, 500, 1, 1, 2.5) == []
    # 1.2345 B more: K = -1.2345, -K/Q = 1.2345 ms, sent as 1 ms (Java's Math.round).
    [v] = m.record_produce(ALICE, 1.2345, 1, 1, 2.5)
    assert throttle_ms(v.throttle_seconds) == 1
    [state] = m.snapshot(2.5)
    assert state.tokens == pytest.approx(-1.2345)


def test_request_quota_bucket_is_still_capped_at_one_window() -> None:
    m = bucket_manager(request_rate=2)
    # B = 2 x 11 = 22 requests; 30 at t=0 leave K = -8, -K/Q = 4 s, capped at W = 1 s (KIP-124).
    throttles = [v.throttle_seconds for _ in range(30) for v in m.record_request(ALICE, 0.0, 0.0)]
    assert throttles[-1] == 1.0 and len(throttles) == 8


def test_entity_algorithm_overrides_the_sections_and_mutations_are_always_a_bucket() -> None:
    bob = EntitySpec("bob", None)
    s = QuotaSettings(entities={ALICE_ENTITY: {T: 1000, "controller_mutation_rate": 1}, bob: {T: 1000}},
                      algorithm=SAMPLED, algorithms={bob: TOKEN_BUCKET})
    m = QuotaManager(s, now=0.0)
    m.record_produce(ALICE, 1, 1, 1, 0.0)
    m.record_produce(Principal("bob", "x"), 1, 1, 1, 0.0)
    m.record_mutations(ALICE, 1, 0.0)
    tokens = {(st.quota_type, st.key.user): st.tokens for st in m.snapshot(0.0)}
    assert tokens == {(T, "alice"): None, (T, "bob"): 10999.0, ("controller_mutation_rate", "alice"): 10.0}


def test_reload_that_changes_the_algorithm_restarts_the_sensor() -> None:
    m = bucket_manager(algorithm=SAMPLED, producer_byte_rate=1000)
    m.record_produce(ALICE, 50000, 1, 1, 0.0)   # far over: 50000 B over W = 10 s
    new = QuotaSettings(entities={ALICE_ENTITY: {T: 1000}}, algorithms={ALICE_ENTITY: TOKEN_BUCKET})
    lines = m.update_settings(new, 1.0)
    assert lines == ["/users/alice: algorithm default -> token_bucket",
                     "restarted 1 sensor(s) whose algorithm changed"]
    assert m.sensor_count == 0
    # The next request makes a full bucket: 10000 B fit in B = 11000.
    assert m.record_produce(ALICE, 10000, 1, 1, 1.0) == []
    # A reload that keeps the algorithm keeps the tokens (K = 1000) and takes the new rate.
    m.update_settings(QuotaSettings(entities={ALICE_ENTITY: {T: 500}}, algorithms={ALICE_ENTITY: TOKEN_BUCKET}), 1.0)
    [state] = m.snapshot(1.0)
    assert (state.limit, state.tokens) == (500, pytest.approx(1000))
    assert m.update_settings(QuotaSettings(entities={ALICE_ENTITY: {T: 500}}, algorithm=TOKEN_BUCKET), 1.0) == [
        "quotas.algorithm sampled -> token_bucket", "/users/alice: algorithm token_bucket -> default"]
    assert m.sensor_count == 1   # still a bucket: kept


def test_algorithm_values_are_checked() -> None:
    with pytest.raises(ValueError, match="algorithm must be one of"):
        QuotaSettings(algorithm="leaky")
    with pytest.raises(ValueError, match="sets no quota"):
        QuotaSettings(algorithms={ALICE_ENTITY: TOKEN_BUCKET})


def run_producer(algorithm: str, q: float = 100_000, size: int = 65536, seconds: float = 60.0) -> list[tuple]:
    """A producer with one request in flight that honours every throttle (KIP-219), for `seconds`.

    Returns (time, bytes) per request and the time its first throttle ended (the end of the first burst).
    """
    m = bucket_manager(algorithm, producer_byte_rate=q)
    now, sent, first_burst_end = 0.0, [], None
    while now < seconds:
        sent.append((now, size))
        throttle = max((v.throttle_seconds for v in m.record_produce(ALICE, size, 1, 1, now)), default=0.0)
        if throttle and first_burst_end is None:
            first_burst_end = now + throttle
        now += max(throttle_ms(throttle) / 1000, 0.001)   # 1 ms per unthrottled round trip
    return sent, first_burst_end


def busiest_second(sent: list[tuple], start: float) -> float:
    """The most bytes any one-second span starting at a request at or after `start` carries."""
    times = [t for t, _ in sent]
    return max(sum(b for t2, b in sent if t <= t2 < t + 1.0) for t in times if t >= start and t + 1 <= times[-1])


def test_token_bucket_holds_the_rate_without_the_sampled_rates_echo_bursts() -> None:
    # 64 KiB requests at Q = 100 kB/s. The bucket: 17 requests at t=0 (B = 1.1 MB), then one
    # request per 65536 / 100000 = 0.655 s; any one second after that holds at most 2, 1.31 Q.
    sent, burst_end = run_producer(TOKEN_BUCKET)
    assert busiest_second(sent, burst_end) <= 1.6 * 100_000
    total = sum(b for _, b in sent) - 1_100_000   # the burst B is credit, not rate
    assert total / sent[-1][0] == pytest.approx(100_000, rel=0.10)
    # The sampled rate lets a whole window's worth through each time old samples leave the span:
    # the same producer gets seconds far above 1.6 Q well after its first burst.
    sent, burst_end = run_producer(SAMPLED)
    assert busiest_second(sent, burst_end) > 3 * 100_000
