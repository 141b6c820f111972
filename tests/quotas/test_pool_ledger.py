"""Capacity pools in the quota manager (pools/ledger.py, pools/pool_set.py): membership, division, lending, the
reclaim, and the bound on the quotas during one; then the other quota types, topic pools, reload,
expiry and the adaptive hook.

Unless a test says otherwise: the issue's pool (ingest, producer_byte_rate B = 300 kB/s; job-a-
weight 3, job-b- and job-c- weight 1), windows of W = 0.2 s x 11, so a span is 2.2 s and a fresh
sensor measures over (11 - 1) x 0.2 = 2.0 s.
"""

from __future__ import annotations

import dataclasses

import pytest
from helpers.pool_config import issue_pool

from kqp.config import quota_settings_from
from kqp.quotas.manager import QuotaManager, combine
from kqp.quotas.model import Principal, QuotaKey, QuotaSettings, QuotaType
from kqp.quotas.pools.ledger import PoolLedger

B = 300_000.0
PRODUCE = QuotaType.PRODUCER_BYTE_RATE
A1, B1, C1 = (Principal("ANONYMOUS", f"job-{j}-1") for j in "abc")
KEY_A, KEY_B, KEY_C = (QuotaKey("", "", f"job-{j}-") for j in "abc")


def section(**pool: object) -> dict:
    """The issue's config, its pool's keys changed by `pool`, measured with Kafka's sampled rate (the
    arithmetic in the comments)."""
    data = {**issue_pool(), "algorithm": "sampled"}
    data["pools"][0].update(pool)
    return data


def manager(data: dict | None = None) -> QuotaManager:
    return QuotaManager(quota_settings_from(data or section()), 0.0)


def ledger(m: QuotaManager, name: str = "ingest", quota_type: QuotaType = PRODUCE) -> PoolLedger:
    return m.pools.ledgers[(name, quota_type)]


def quotas(m: QuotaManager) -> dict[QuotaKey, float]:
    return {key: member.quota for key, member in ledger(m).members.items()}


def produce(m: QuotaManager, p: Principal, nbytes: float, now: float) -> float:
    """The throttle of one Produce, pool's or entity's."""
    return combine(m.record_produce(p, int(nbytes), 1, 1, now))[0]


def test_a_member_alone_gets_the_whole_budget() -> None:
    m = manager()
    assert produce(m, A1, 1000, 0.0) == 0
    assert quotas(m) == {KEY_A: B}


def test_members_are_the_entities_principals_resolve_to() -> None:
    m = manager()
    produce(m, Principal("ANONYMOUS", "job-a-1"), 1000, 0.0)
    produce(m, Principal("ANONYMOUS", "job-a-2"), 1000, 0.0)    # the same prefix entity: the same member
    produce(m, Principal("ANONYMOUS", "job-x-1"), 1000, 0.0)    # no entity: its own member, weight 1
    produce(m, Principal("ANONYMOUS", "other"), 1000, 0.0)      # no selector matches: not in the pool
    assert set(quotas(m)) == {KEY_A, QuotaKey("ANONYMOUS", "job-x-1")}
    # 3L + L = 300k: 225k and 75k
    assert quotas(m) == {KEY_A: 225_000, QuotaKey("ANONYMOUS", "job-x-1"): 75_000}


def test_a_joining_member_gets_its_share_before_its_first_charge_is_checked() -> None:
    m = manager()
    produce(m, A1, 1000, 0.0)
    # job-b- joins wanting its share: 225k and 75k at once, before its 100 kB is checked:
    # 100000 / 2.0 s = 50 kB/s <= 75 kB/s, no throttle
    assert produce(m, B1, 100_000, 0.01) == 0
    assert quotas(m) == {KEY_A: 225_000, KEY_B: 75_000}
    # job-c- as well: 3L + L + L = 300k, L = 60k
    produce(m, C1, 1000, 0.02)
    assert quotas(m) == {KEY_A: 180_000, KEY_B: 60_000, KEY_C: 60_000}


def test_a_member_held_back_is_throttled_at_its_allocation() -> None:
    m = manager()
    produce(m, A1, 1000, 0.0)
    produce(m, B1, 1000, 0.0)
    # job-b-: 201000 B over W = 2.0 + 0.05 s against 75 kB/s: X = 201000 / 75000 - 2.05 = 0.63 s
    [v] = m.record_produce(B1, 200_000, 1, 1, 0.05)
    assert (v.quota_type, v.key, v.pool) == (PRODUCE, KEY_B, "ingest")
    assert v.throttle_seconds == pytest.approx(0.63)


def lending() -> QuotaManager:
    """job-a- held back, job-b- nearly idle: at t = 0.4 (window 2) job-b-'s share is lent."""
    m = manager()
    produce(m, A1, 1000, 0.0)
    produce(m, B1, 1000, 0.0)
    # job-a-: 601000 B over 2.05 s = 293 kB/s against 225 kB/s: held (X = 601000 / 225000 - 2.05 = 0.62 s)
    assert produce(m, A1, 600_000, 0.05) > 0
    m.pools.snapshot(0.4)   # window 2 begins: both measured
    return m


def test_an_idle_members_share_is_lent_and_its_quota_kept() -> None:
    m = lending()
    a, b = ledger(m).members[KEY_A], ledger(m).members[KEY_B]
    # job-b- used 1000 B in window 0: max(0, 1000 / 0.2) = 5 kB/s, but over the two windows it has been
    # here (it joined in window 0; over a span once it has been here for one) 1000 / 0.4 = 2.5 kB/s
    assert b.demand == pytest.approx(1000 / 0.4)
    # job-a- is held: unbounded. Max-min: job-b- gets its 2.5k, job-a- the rest; fair 225k / 75k
    assert (a.allocation, b.allocation) == pytest.approx((B - 2500, 2500))
    # job-b- keeps its fair share as its quota: only its unused 72.5k is lent
    assert quotas(m) == pytest.approx({KEY_A: B - 2500, KEY_B: 75_000})
    assert ledger(m).lent == pytest.approx(75_000 - 2500)
    assert sum(quotas(m).values()) == pytest.approx(B + ledger(m).lent)


def test_a_lender_coming_back_reclaims_its_share_within_the_window() -> None:
    m = lending()
    # job-b- measured at 2.5 kB/s: twice that over a window is 2 x 2500 x 0.2 = 1000 B. Its 15 kB (its share
    # for one window) crosses it: the pool divides again before the charge is checked, job-a- back to 225k.
    assert produce(m, B1, 15_000, 0.45) == 0      # (1000 + 15000) / 2.0 = 8 kB/s, within 75k
    assert quotas(m) == {KEY_A: 225_000, KEY_B: 75_000}
    assert ledger(m).lent == 0


def test_a_light_lender_below_twice_its_demand_does_not_reclaim() -> None:
    m = lending()
    produce(m, B1, 900, 0.45)                      # 900 B <= 1000 B: still the 2.5 kB/s member
    assert quotas(m) == pytest.approx({KEY_A: B - 2500, KEY_B: 75_000})


def test_a_member_back_after_a_span_of_silence_gets_its_share_at_once() -> None:
    m = manager()
    produce(m, A1, 1000, 0.0)
    produce(m, B1, 1000, 0.0)
    # t = 2.8: both silent for more than a span (2.2 s). job-a- alone wants the budget: 300k.
    # 620000 / 2.0 = 310 kB/s: X = (310 - 300) / 300 x 2.0 = 0.0667 s
    assert produce(m, A1, 620_000, 2.8) == pytest.approx(0.0667, abs=1e-4)
    assert quotas(m)[KEY_A] == B
    # t = 3.0: job-b- back: its 75k before its first charge is checked, job-a- down to 225k
    assert produce(m, B1, 1000, 3.0) == 0
    assert quotas(m) == {KEY_A: 225_000, KEY_B: 75_000}


def test_under_use_gets_all_it_offers_and_the_rest_goes_to_the_others() -> None:
    m = manager()
    now = 0.0
    for window in range(20):
        now = 0.2 * window + 0.01
        produce(m, B1, 10_000, now)       # 10 kB a window: 50 kB/s, under its 75k share
        produce(m, A1, 100_000, now)      # 500 kB/s offered: held back
    b = ledger(m).members[KEY_B]
    assert b.demand == pytest.approx(50_000, rel=0.03)
    # job-b- is never throttled (its quota stays 75k); job-a- gets 300k - 50k
    assert b.held_until == float("-inf")
    assert quotas(m)[KEY_A] == pytest.approx(250_000, rel=0.01)


def test_the_quotas_stay_within_budget_plus_lent_at_every_step() -> None:
    # A run of three members coming and going, with lumpy requests: after every charge the quotas
    # of the active members sum to at most B + lent (the docstring's bound).
    m = manager()
    members = [(A1, 0.0, 9.0, 40_000), (B1, 1.0, 4.0, 6_000), (C1, 2.0, 7.0, 20_000), (B1, 6.0, 9.0, 30_000)]
    mute: dict[Principal, float] = {}
    steps = 0
    for tick in range(900):
        now = tick * 0.01
        for p, start, stop, size in members:
            if start <= now < stop and mute.get(p, 0.0) <= now:
                mute[p] = now + produce(m, p, size, now)
                pool = ledger(m)
                active = [x for x in pool.members.values() if x.fair > 0]
                assert sum(x.quota for x in active) <= pool.budget + pool.lent + 1e-6
                steps += 1
    assert steps > 100


def test_sampled_history_follows_the_quota() -> None:
    m = lending()
    a = ledger(m).members[KEY_A]
    before = a.sensor.measure(0.45) / a.quota
    produce(m, B1, 15_000, 0.45)            # job-a-'s quota 299.5k -> 225k
    # Its past usage reads as the same fraction of the new quota: nothing to pay back for it.
    assert a.sensor.measure(0.45) / a.quota == pytest.approx(before)


def test_max_share_caps_a_member_alone_and_min_share_lifts_one() -> None:
    data = section()
    data["entities"][1]["max_share"] = 0.5
    data["entities"][2]["min_share"] = 0.5
    m = manager(data)
    produce(m, B1, 1000, 0.0)
    assert quotas(m) == {KEY_B: 150_000}             # alone, but never above 0.5 B
    produce(m, A1, 1000, 0.0)
    produce(m, C1, 1000, 0.0)
    # job-c-'s floor 150k; job-a- (3L) and job-b- (L) share the other 150k: 112.5k, 37.5k
    assert quotas(m) == {KEY_A: 112_500, KEY_B: 37_500, KEY_C: 150_000}


def test_an_entitys_own_quota_still_applies_the_smaller_wins() -> None:
    data = section()
    data["entities"][0]["producer_byte_rate"] = 100_000
    m = manager(data)
    # 250000 / 2.0 = 125 kB/s: over job-a-'s own 100k (X = 0.25 x 2.0 = 0.5 s), within the pool's 300k
    [v] = m.record_produce(A1, 250_000, 1, 1, 0.0)
    assert (v.quota_type, v.key, v.pool) == (PRODUCE, KEY_A, None)
    assert v.throttle_seconds == pytest.approx(0.5)
    assert quotas(m) == {KEY_A: B}


def test_token_bucket_members() -> None:
    m = manager({**section(), "algorithm": "token_bucket"})
    # alone: rate 300k, burst 300k x 2.2 = 660 kB; 700 kB leaves -40 kB: 40k / 300k = 0.1333 s
    assert produce(m, A1, 700_000, 0.0) == pytest.approx(40_000 / 300_000)
    produce(m, B1, 1, 0.0)
    # job-a- now 225k: the debt stays, repaid at the new rate: 40001 / 225000 s
    bucket = ledger(m).members[KEY_A].sensor
    assert bucket.throttle(0.0) == pytest.approx(40_000 / 225_000)


def test_request_and_consumer_pools() -> None:
    m = manager({"window_size_seconds": 0.2, "pools": [
        {"name": "reads", "consumer_byte_rate": 100_000, "request_rate": 10, "members": [{"client_id": "svc"}]}]})
    svc = Principal("ANONYMOUS", "svc")
    assert m.charges_fetches(svc) and not m.charges_fetches(A1)
    assert m.fetch_max_bytes_cap(svc) == 100_000 * 10 * 0.2   # before it joins: the budget
    assert m.record_fetch(svc, 150_000, 1, 1, 0.0) == []      # 150000 / 2.0 = 75 kB/s
    # 250000 / 2.0 = 125 kB/s: X = 0.25 x 2.0 = 0.5 s
    [v] = m.record_fetch(svc, 100_000, 1, 1, 0.0)
    assert (v.quota_type, v.throttle_seconds) == (QuotaType.CONSUMER_BYTE_RATE, pytest.approx(0.5))
    m.unrecord_fetch(svc, 100_000, 1, 1, 0.0)                 # answered empty: taken back
    member = ledger(m, "reads", QuotaType.CONSUMER_BYTE_RATE).members[QuotaKey("ANONYMOUS", "svc")]
    assert member.sensor.measure(0.0) == 75_000
    for _ in range(20):
        throttle = combine(m.record_request(svc, 0.0, 0.0))[0]
    # 20 requests over 2.0 s = 10/s: within; the 21st: 10.5/s, X = 0.05 x 2.0 = 0.1 s (capped at W = 0.2)
    assert throttle == 0
    assert combine(m.record_request(svc, 0.0, 0.0))[0] == pytest.approx(0.1)


def test_counts_are_read_for_a_record_rate_pool() -> None:
    m = manager({"pools": [{"name": "r", "producer_record_rate": 5, "members": [{"user": "ANONYMOUS"}]}]})
    assert m.counts_produce_records(A1) and not m.counts_fetch_records(A1)
    assert not m.counts_produce_records(Principal("bob", "x"))


def test_topic_pools_charge_only_their_topics() -> None:
    m = manager({"window_size_seconds": 0.2, "pools": [
        {"name": "events", "producer_byte_rate": 100_000, "topics": ["events", "logs-*"]}]})
    assert m.topic_pools and m.pools.wants_topics(A1, PRODUCE)
    assert not m.pools.wants_topics(A1, QuotaType.CONSUMER_BYTE_RATE)
    assert m.record_produce(A1, 10**9, 1, 1, 0.0) == []       # a topic pool takes nothing from record_produce
    sizes = [("events", 150_000), ("other", 10**9), ("logs-eu", 60_000)]
    # 210000 / 2.0 = 105 kB/s: X = 0.05 x 2.0 = 0.1 s
    [v] = m.record_topic_bytes(A1, PRODUCE, sizes, 0.0)
    assert (v.pool, v.key, v.throttle_seconds) == ("events", QuotaKey("ANONYMOUS", "job-a-1"), pytest.approx(0.1))
    m.record_topic_bytes(A1, PRODUCE, [("events", 210_000)], 0.0, refund=True)
    assert m.record_topic_bytes(A1, PRODUCE, [("logs-x", 10)], 0.0) == []
    assert not manager().topic_pools and manager().record_topic_bytes(A1, PRODUCE, sizes, 0.0) == []


def test_reload_keeps_the_measurements_and_takes_the_new_division() -> None:
    m = manager()
    produce(m, A1, 100_000, 0.0)
    produce(m, B1, 1000, 0.0)
    sensor = ledger(m).members[KEY_A].sensor
    data = section(producer_byte_rate=600_000)
    data["entities"][1]["weight"] = 3
    lines = m.update_settings(quota_settings_from(data), 0.1)
    assert "pool ingest: producer_byte_rate 300000 -> 600000" in lines
    assert "/client-id-prefixes/job-b- (pool member): weight 1 -> 3" in lines
    assert ledger(m).members[KEY_A].sensor is sensor and sensor.measure(0.1) > 0
    assert quotas(m) == {KEY_A: 300_000, KEY_B: 300_000}
    # job-b-'s entry gone: its member is released; the pool gone: everything is
    data["entities"].pop(1)
    assert "released 1 pool member(s) whose pool or entity no longer applies" in m.update_settings(
        quota_settings_from(data), 0.2)
    lines = m.update_settings(quota_settings_from({"window_size_seconds": 0.2}), 0.3)
    assert "pool ingest removed (producer_byte_rate 600000)" in lines
    assert m.pools.ledgers == {} and m.record_produce(A1, 10**9, 1, 1, 0.4) == []


def test_new_windows_restart_the_pools() -> None:
    m = manager()
    produce(m, A1, 100_000, 0.0)
    m.update_settings(quota_settings_from({**section(), "window_size_seconds": 1.0}), 0.1)
    assert ledger(m).members == {}


def test_idle_members_expire() -> None:
    m = manager()
    produce(m, A1, 1000, 0.0)
    produce(m, B1, 1000, 50.0)
    assert m.expire(60.0, 30.0) == 1
    assert set(quotas(m)) == {KEY_B}


def test_the_adaptive_hook_sets_the_budget_divided() -> None:
    m = manager()
    produce(m, A1, 1000, 0.0)
    produce(m, B1, 1000, 0.0)
    m.pools.set_budget("ingest", PRODUCE, 100_000, 0.1)
    assert quotas(m) == {KEY_A: 75_000, KEY_B: 25_000}
    m.pools.set_budget("ingest", PRODUCE, 10**9, 0.2)      # never above the configured ceiling
    assert ledger(m).budget == B and quotas(m) == {KEY_A: 225_000, KEY_B: 75_000}
    [state] = m.pools.snapshot(0.3)
    assert (state.budget, state.ceiling, len(state.members)) == (B, B, 2)


def test_no_pool_costs_nothing() -> None:
    m = QuotaManager(QuotaSettings(), 0.0)
    assert m.pools.kinds == (False, False, False) and not m.topic_pools
    assert m.record_produce(A1, 10**9, 1, 1, 0.0) == [] and m.pools.member_count == 0
    assert dataclasses.replace(quota_settings_from(section())).pools   # settings carry pools as values


def test_a_member_starting_after_the_others_spent_brings_its_share_of_the_allowance() -> None:
    # steady, 1000 B/s over 11 windows of 0.2 s: the pool's first allowance is 2000 B. A spends all of
    # it alone; B, starting then, gets a full bucket of its half share, as a new entity would: 3000 B
    # go through before either is throttled (the fidelity matrix's pool cells allow for this).
    settings = quota_settings_from({"algorithm": "steady", "window_size_seconds": 0.2, "window_count": 11,
                                    "pools": [{"name": "p", "producer_byte_rate": 1000,
                                               "members": [{"client_id_prefix": "m-"}]}]})
    m = QuotaManager(settings, 0.0)
    a, b = Principal("ANONYMOUS", "m-a"), Principal("ANONYMOUS", "m-b")
    assert m.record_produce(a, 2000, 1, 1, 0.0) == []
    assert m.record_produce(a, 1, 1, 1, 0.0) != []
    assert m.record_produce(b, 1000, 1, 1, 0.01) == []
    [late] = m.record_produce(b, 100, 1, 1, 0.01)
    assert late.throttle_seconds == pytest.approx(0.2, abs=0.01)   # 100 B of debt at its 500 B/s share
