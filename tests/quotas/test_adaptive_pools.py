"""Adaptive pools in the quota manager (pools/adaptive.py): the law wired to a pool's ledger.

Unless a test says otherwise: issue 22's pool (ingest, producer_byte_rate ceiling C = 10 MB/s,
`adaptive: {target_latency_ms: 100}`; members job-a- (weight 3), job-b-, job-c-), windows of
W = 0.2 s, so the law's floor is 1% of C = 100 kB/s and a window's delivered rate is bytes / 0.2.
The law's own arithmetic is test_adaptive_law.py's; here: which windows it closes, with what, when,
and what the pool then divides.
"""

from __future__ import annotations

import math

import pytest
from helpers.pool_config import issue_pool

from kqp.config import quota_settings_from
from kqp.quotas.manager import QuotaManager, combine
from kqp.quotas.model import ChargeKind, Principal, QuotaKey, QuotaType
from kqp.quotas.pools.adaptive import AdaptivePool
from kqp.quotas.pools.adaptive_law import Reason
from kqp.quotas.pools.ledger import PoolLedger

C = 10_000_000.0
FLOOR = C / 100
W = 0.2
BYTES = QuotaType.PRODUCER_BYTE_RATE
A1, B1 = (Principal("ANONYMOUS", f"job-{j}-1") for j in "ab")
OUTSIDER = Principal("ANONYMOUS", "bystander")
KEY_A, KEY_B = (QuotaKey("", "", f"job-{j}-") for j in "ab")


def section(**adaptive: object) -> dict:
    data = issue_pool()
    data["pools"][0].update(producer_byte_rate=C, adaptive={"target_latency_ms": 100, **adaptive})
    return data


def manager(data: dict | None = None) -> QuotaManager:
    return QuotaManager(quota_settings_from(data or section()), 0.0)


def ledger(m: QuotaManager) -> PoolLedger:
    return m.pools.ledgers[("ingest", BYTES)]


def adaptive(m: QuotaManager) -> AdaptivePool:
    return m.pools.adaptive[("ingest", BYTES)]


def produce(m: QuotaManager, p: Principal, nbytes: float, now: float) -> float:
    return combine(m.record_produce(p, int(nbytes), 1, 1, now))[0]


def answered(pool: AdaptivePool, latency: float, nbytes: float, count: int = 5, broker: int = 1,
             at: float = 0.1) -> None:
    for _ in range(count):
        pool.observe(at, broker, latency, (nbytes / count, 1, 1, 1), 0)


def test_a_new_adaptive_pool_divides_its_floor_and_its_members_use_a_token_bucket() -> None:
    m = manager()
    assert ledger(m).budget == FLOOR
    produce(m, A1, 1000, 0.0)
    member = ledger(m).members[KEY_A]
    assert member.quota == FLOOR and member.sensor.bucket is not None   # quotas.algorithm is `sampled`


def test_the_law_closes_each_window_at_the_first_charge_of_the_next() -> None:
    m = manager()
    pool = adaptive(m)
    produce(m, A1, 1000, 0.05)          # window 0
    answered(pool, 0.020, 40_000)       # 5 answers at 20 ms, 40 kB: D = 40 kB / 0.2 s = 200 kB/s
    produce(m, A1, 1000, 0.15)          # still window 0: nothing closes
    assert ledger(m).budget == FLOOR and pool.window == 0
    produce(m, A1, 1000, 0.21)          # window 1 begins: window 0 closes
    # Slow start (healthy, below ssthresh = C): min(2 B, 2 D) = min(200k, 400k) = 200 kB/s.
    assert pool.law.latency == pytest.approx(0.020, rel=0.1)
    assert ledger(m).budget == 2 * FLOOR and pool.law.reason is Reason.SLOW_START
    assert ledger(m).members[KEY_A].quota == 2 * FLOOR   # divided at once: job-a- is alone


def test_over_target_the_pool_divides_just_under_what_the_broker_delivered() -> None:
    m = manager()
    pool = adaptive(m)
    pool.law.budget = ledger(m).budget = 500_000.0   # as if it had grown since
    produce(m, A1, 1000, 0.05)
    produce(m, B1, 1000, 0.06)
    answered(pool, 0.150, 60_000)       # L = 150 ms against 100; D = 60 kB / 0.2 s = 300 kB/s
    produce(m, A1, 1000, 0.25)
    # B = min(B, D (1 + τ/L) / 2) = min(500k, 300k x (1 + 100/150) / 2) = 300k x 0.8333 = 250 kB/s
    # (L within the ±9% of its histogram bucket), divided 3:1 between job-a- and job-b-.
    assert pool.law.reason is Reason.LATENCY
    assert ledger(m).budget == pytest.approx(250_000, rel=0.05)
    quotas = {k: member.quota for k, member in ledger(m).members.items()}
    assert quotas[KEY_A] == pytest.approx(3 * quotas[KEY_B]) and sum(quotas.values()) == pytest.approx(
        ledger(m).budget)


def test_a_budget_already_under_what_the_broker_delivers_holds_over_target() -> None:
    m = manager()
    pool = adaptive(m)
    produce(m, A1, 1000, 0.05)
    answered(pool, 0.300, 60_000)       # L = 300 ms; D = 300 kB/s
    produce(m, A1, 1000, 0.25)
    # min(B, D (1 + 1/3) / 2) = min(100k, 200k) = 100k: held while the queue drains, no increase either.
    assert ledger(m).budget == FLOOR and pool.law.latency > 0.1


def test_windows_without_a_charge_are_closed_at_the_next_with_the_demand_then_measured() -> None:
    m = manager()
    pool = adaptive(m)
    pool.law.budget = ledger(m).budget = 1_000_000.0
    produce(m, A1, 1000, 0.05)          # window 0
    produce(m, A1, 1000, 2.05)          # window 10: windows 0..9 close, nothing answered in them
    # job-a- used nothing in windows 8 and 9: demand 0, so each of the 10 windows is idle and
    # decays the budget: B x 0.95^10 (the decay wins over 1.5 x 0).
    assert ledger(m).budget == pytest.approx(1_000_000 * 0.95 ** 10, rel=1e-6)
    assert pool.window == 10 and pool.law.reason is Reason.IDLE


def test_answers_across_windows_without_a_charge_are_one_window_of_the_law() -> None:
    m = manager()
    pool = adaptive(m)
    # Window 0: 300 kB against a bucket of 100 kB/s x 2.2 s = 220 kB: muted 0.8 s, into window 4.
    assert produce(m, A1, 300_000, 0.05) == pytest.approx(0.8)
    answered(pool, 0.020, 100_000)      # answered meanwhile: 100 kB
    produce(m, A1, 1000, 1.05)          # window 5: windows 0..4 are one of 1.0 s
    # D = 100 kB / 1.0 s = 100 kB/s (not / 0.2 s); job-a- was held back (demand unbounded), so
    # slow start: min(2 B, 2 D) = 200 kB/s.
    assert pool.law.delivered == pytest.approx(100_000) and ledger(m).budget == 2 * FLOOR


def test_a_long_silence_closes_at_most_catch_up_windows() -> None:
    m = manager()
    pool = adaptive(m)
    produce(m, A1, 1000, 0.05)
    produce(m, A1, 1000, 3600.0)        # 18,000 windows later: bounded work, and the floor holds
    assert ledger(m).budget == FLOOR and pool.window == 18_000


def test_requests_from_outside_the_pool_are_never_watched_nor_throttled_by_it() -> None:
    m = manager()
    assert m.pools.watching(A1, ChargeKind.PRODUCE) == (adaptive(m),) and m.pools.watching(A1, ChargeKind.FETCH) == ()
    assert m.pools.watching(OUTSIDER, ChargeKind.PRODUCE) == ()
    assert m.pools.watch_kinds == (True, False)
    assert produce(m, OUTSIDER, 10**9, 0.0) == 0     # a GB at once: no pool holds it


def test_a_request_rate_pool_watches_produce_and_fetch() -> None:
    data = section()
    data["pools"][0] = {"name": "ingest", "request_rate": 1000, "members": [{"client_id_prefix": "job-"}],
                        "adaptive": {"target_latency_ms": 50}}
    m = manager(data)
    [pool] = m.pools.adaptive.values()
    assert pool.unit == 3 and m.pools.watch_kinds == (True, True)
    assert m.pools.watching(A1, ChargeKind.PRODUCE) == m.pools.watching(A1, ChargeKind.FETCH) == (pool,)


def test_the_floor_is_min_budget_else_the_members_min_shares() -> None:
    assert adaptive(manager(section(min_budget=250_000))).law.floor == 250_000
    data = section()
    data["entities"][0]["min_share"] = 0.05
    data["entities"][1]["min_share"] = 0.03
    assert adaptive(manager(data)).law.floor == pytest.approx(0.08 * C)   # (0.05 + 0.03) x C


def test_a_reload_keeps_the_laws_state_and_dropping_adaptive_restores_the_ceiling() -> None:
    m = manager()
    pool = adaptive(m)
    pool.law.budget = ledger(m).budget = 700_000.0
    m.update_settings(quota_settings_from(section(target_latency_ms=200)), 1.0)
    assert adaptive(m) is pool and pool.law.target == 0.2 and ledger(m).budget == 700_000
    data = section()
    del data["pools"][0]["adaptive"]
    m.update_settings(quota_settings_from(data), 2.0)
    assert m.pools.adaptive == {} and ledger(m).budget == C and ledger(m).on_window is None


def test_budget_changes_are_kept_for_kqp_explain() -> None:
    m = manager()
    pool = adaptive(m)
    produce(m, A1, 1000, 0.05)
    answered(pool, 0.020, 40_000)
    produce(m, A1, 1000, 0.25)
    [(quota_type, change)] = m.pools.adaptive_changes(0.3)["ingest"]
    assert quota_type == BYTES and (change.old, change.new, change.reason) == (FLOOR, 2 * FLOOR, Reason.SLOW_START)
    assert change.at == pytest.approx(0.2)   # the end of the window it closed, on the caller's clock
    assert change.describe().startswith("budget 100,000 -> 200,000/s: regaining the last safe budget")


def test_a_fetch_watched_but_not_latency_still_counts_its_delivery() -> None:
    data = section()
    data["pools"][0] = {"name": "ingest", "consumer_byte_rate": C, "members": [{"client_id_prefix": "job-"}],
                        "adaptive": {"target_latency_ms": 100}}
    m = manager(data)
    [pool] = m.pools.adaptive.values()
    m.record_fetch(A1, 1000, 1, 1, 0.05)
    for _ in range(5):
        pool.observe(0.1, 1, None, (20_000, 1, 1, 1), 0)   # waited on max_wait_ms: no latency sample
    m.record_fetch(A1, 1000, 1, 1, 0.25)
    assert pool.law.latency is None and pool.law.delivered == pytest.approx(100_000 / W)
    assert not math.isnan(m.pools.ledgers[("ingest", QuotaType.CONSUMER_BYTE_RATE)].budget)


def test_a_broker_answering_nothing_is_as_slow_as_the_oldest_unanswered_produce() -> None:
    """No answer and no charge after a Produce forwarded at 0.05: the process's upkeep (`expire`, once
    a second at most) closes window 0 at 0.25 with the send's age, 0.2 s, as the window's latency."""
    m = manager()
    pool = adaptive(m)
    pool.law.budget = ledger(m).budget = 500_000.0
    produce(m, A1, 1000, 0.05)
    pool.sent("r1", 0.05)
    m.expire(0.25, 3600.0)
    # Nothing delivered, so the cut is anchored on B: min(B, B (1 + τ/L) / 2) = 500k x (1 + 0.1/0.2) / 2
    # = 375 kB/s, dated at the window's end.
    assert pool.window == 1 and pool.law.reason is Reason.STALLED
    assert ledger(m).budget == pytest.approx(375_000)
    pool.answered("r1")                 # answered (or its connection closed): no longer a stall
    m.expire(0.45, 3600.0)
    assert pool.law.reason is not Reason.STALLED and pool.pending == {}


def test_a_send_unanswered_for_pending_max_is_forgotten() -> None:
    m = manager()
    pool = adaptive(m)
    pool.sent("lost", 0.05)
    pool.sent("recent", 61.0)
    produce(m, A1, 1000, 61.05)         # closes windows 0..304: `lost` is 61 s old, over PENDING_MAX = 60 s
    assert list(pool.pending) == ["recent"]
