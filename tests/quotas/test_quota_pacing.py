"""Pacing, pure (issue 20): the pace each violation carries for a client that does not back off.

A paced client is muted for its request's own cost, `value / limit` seconds of quota, queued behind
the key's earlier paced requests, never longer than the throttle (`QuotaSensor.pace`). The numbers
are Kafka's: windows of 1 s x 11, so a fresh sensor measures over (11 - 1) x 1 s = 10 s and a total
of U bytes recorded by then reads as U / 10 B/s; with T = 1000 B/s its throttle is
X = (U / 10 - T) / T x 10 = U / 1000 - 10 seconds.
"""

from __future__ import annotations

import pytest

from kqp.config import quota_settings_from
from kqp.quotas.fleet.ledger import FleetLedger
from kqp.quotas.fleet.store import FleetStore
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import EntitySpec, Principal, QuotaKey, QuotaSettings, QuotaType
from kqp.quotas.rates.throttle import Violation, largest

P, Q = Principal("ANONYMOUS", "job"), Principal("ANONYMOUS", "other")
T = 1000.0


def manager(**quotas: float) -> QuotaManager:
    return QuotaManager(QuotaSettings(1.0, 11, {EntitySpec(None, "job"): quotas}), 0.0)


def only(violations: list[Violation]) -> Violation:
    [v] = violations
    return v


def test_a_request_is_paced_by_its_own_cost_while_its_key_stays_over_quota() -> None:
    m = manager(producer_byte_rate=T)
    # 10 000 B at t=0 is Kafka's allowance for a fresh sensor (U / 1000 - 10 = 0: no throttle).
    assert m.record_produce(P, 10_000, 1, 1, 0.0) == []
    # 2000 B more: X = 12 - 10 = 2 s, and its own cost is 2 s: the pace is 2 s.
    first = only(m.record_produce(P, 2000, 1, 1, 0.0))
    assert first.throttle_seconds == pytest.approx(2.0) and first.pace_seconds == pytest.approx(2.0)
    # The paced client's next 1000 B at t=2 (the end of its mute): U = 13 000, X = 3 s (a young
    # sensor's window stays 10 s, so waiting does not lower X); its own cost is 1000 / 1000 = 1 s and
    # nothing is queued after t=2: muted 1 s.
    second = only(m.record_produce(P, 1000, 1, 1, 2.0))
    assert second.throttle_seconds == pytest.approx(3.0) and second.pace_seconds == pytest.approx(1.0)
    # And again at t=3: U = 14 000, X = 4 s, pace 1 s. The throttles grow, the pace does not: each
    # request is followed by its own cost of silence, 1000 B per second, the quota.
    third = only(m.record_produce(P, 1000, 1, 1, 3.0))
    assert third.throttle_seconds == pytest.approx(4.0) and third.pace_seconds == pytest.approx(1.0)


def test_requests_of_one_key_queue_behind_each_other_whatever_connection_sends_them() -> None:
    m = manager(producer_byte_rate=T)
    m.record_produce(P, 10_000, 1, 1, 0.0)
    m.record_produce(P, 2000, 1, 1, 0.0)            # over quota: paced until t=2
    # Two connections of the same client id send 1000 B each at t=2: the first is paced 1 s (until
    # t=3), the second queues behind it, 3 + 1 - 2 = 2 s: together 2000 B in 2 s, the quota, not twice it.
    a = only(m.record_produce(P, 1000, 1, 1, 2.0))
    b = only(m.record_produce(P, 1000, 1, 1, 2.0))
    assert (a.pace_seconds, b.pace_seconds) == (pytest.approx(1.0), pytest.approx(2.0))
    # Another key has a clock of its own.
    assert m.record_produce(Q, 1000, 1, 1, 2.0) == []


def test_the_pace_never_exceeds_the_throttle_and_what_a_short_throttle_let_through_is_still_owed() -> None:
    m = manager(producer_byte_rate=T)
    # 12 000 B in one request: X = 2 s, but it costs 12 s of quota: the pace is the throttle, 2 s,
    # and the key's clock moves the whole 12 s on (to t=12).
    first = only(m.record_produce(P, 12_000, 1, 1, 0.0))
    assert first.pace_seconds == pytest.approx(2.0)
    # 1000 B at t=2: X = 13 - 10 = 3 s; the queue says 12 + 1 - 2 = 11 s: the throttle, 3 s. Pacing
    # never undercuts what is owed: the sampled rate's short throttles (an old burst forgotten) are
    # paid back by the next paces, so a paced key never runs above the quota for longer than under Kafka.
    assert only(m.record_produce(P, 1000, 1, 1, 2.0)).pace_seconds == pytest.approx(3.0)


def test_each_quota_type_paces_by_its_own_unit() -> None:
    # request_rate 2/s: each request costs 1 / 2 = 0.5 s. The 21st request at t=0 reads as 2.1/s,
    # X = (2.1 - 2) / 2 x 10 = 0.5 s (clock to t=0.5); the 22nd, 2.2/s, X = 1 s (capped at one window;
    # clock to t=1). One more at t=5: 2.3/s, X capped at 1 s; nothing queued after t=5: paced 0.5 s.
    m = manager(request_rate=2)
    for _ in range(22):
        m.record_request(P, 0.0, 0.0)
    rate = only(m.record_request(P, 0.0, 5.0))
    assert rate.throttle_seconds == pytest.approx(1.0) and rate.pace_seconds == pytest.approx(0.5)
    # request_percentage 50: 5 s of handler time at t=0 is 500 percent-seconds, the allowance; 0.1 s
    # more (10) reads as 51 %: X = (51 - 50) / 50 x 10 = 0.2 s, its cost 10 / 50 = 0.2 s. At t=1 (the
    # window still 10 s), 60 ms more (6 percent-seconds): 51.6 %, X = 0.32 s; it costs 6 / 50 = 0.12 s.
    m = manager(request_percentage=50)
    m.record_request(P, 5.0, 0.0)
    m.record_request(P, 0.1, 0.0)
    v = only(m.record_request(P, 0.06, 1.0))
    assert v.throttle_seconds == pytest.approx(0.32) and v.pace_seconds == pytest.approx(0.12)
    # producer_record_rate 100/s: 1000 records are the allowance, 200 more throttle X = 2 s (cost 2 s);
    # at t=2 a batch of 50 records costs 0.5 s. consumer_byte_rate as producer_byte_rate, on the
    # response's bytes.
    m = manager(producer_record_rate=100, consumer_byte_rate=T)
    m.record_produce(P, 0, 1000, 1, 0.0)
    m.record_produce(P, 0, 200, 1, 0.0)
    assert only(m.record_produce(P, 0, 50, 1, 2.0)).pace_seconds == pytest.approx(0.5)
    m.record_fetch(P, 10_000, 0, 0, 0.0)
    m.record_fetch(P, 2000, 0, 0, 0.0)
    assert only(m.record_fetch(P, 1000, 0, 0, 2.0)).pace_seconds == pytest.approx(1.0)


def test_permissive_mutations_pace_by_partitions_over_the_rate_and_strict_rejections_not_at_all() -> None:
    # controller_mutation_rate 5/s, a bucket of 5 x 11 = 55 tokens: 55 partitions at t=0 empty it.
    # 5 more: -5 tokens, throttle 5 / 5 = 1 s, and their cost is 5 / 5 = 1 s: a token bucket's
    # throttle is already what is owed, so pacing gives the same.
    m = manager(controller_mutation_rate=5)
    assert m.record_mutations(P, 55, 0.0) == []
    first = only(m.record_mutations(P, 5, 0.0))
    assert first.throttle_seconds == pytest.approx(1.0) and first.pace_seconds == pytest.approx(1.0)
    # Strict (CreateTopics v6+): a rejected topic recorded nothing, so there is no cost to pace by.
    rejected = m.admit_mutations(P, 5, 0.5)
    assert rejected is not None and rejected.pace_seconds is None


def test_the_largest_throttle_decides_which_pace_applies() -> None:
    key = Principal("u", "c")
    bytes_ = Violation("producer_byte_rate", 3.0, key, None, 1.0)   # type: ignore[arg-type]
    requests = Violation("request_rate", 1.0, key, None, 0.5)      # type: ignore[arg-type]
    assert largest([requests, bytes_]) is bytes_
    tie = Violation("request_rate", 3.0, key, None, 0.5)           # type: ignore[arg-type]
    assert largest([bytes_, tie]) is tie, "ties name the request quota, whose pace then applies"
    assert largest([]) is None


def test_a_pool_member_is_paced_by_its_allocation() -> None:
    # One member alone in a pool of 1000 B/s: its allocation is the whole budget, as for an entity.
    m = QuotaManager(quota_settings_from({
        "algorithm": "sampled",   # a steady quota's throttle is its debt: never paced
        "entities": [{"client_id_prefix": "jo"}],
        "pools": [{"name": "p", "producer_byte_rate": T, "members": [{"client_id_prefix": "jo"}]}]}), 0.0)
    m.record_produce(P, 10_000, 1, 1, 0.0)
    m.record_produce(P, 2000, 1, 1, 0.0)
    v = only(m.record_produce(P, 1000, 1, 1, 2.0))
    assert v.pool == "p" and v.pace_seconds == pytest.approx(1.0)


def test_a_process_paces_at_its_share_of_the_fleets_usage() -> None:
    """Two processes charge one key in cluster scope; each has sent half the fleet's bytes, so each
    paces at half the quota: a 1000 B request costs 1000 / 500 = 2 s, and together they send T."""
    store = FleetStore()
    managers = []
    for name in ("a", "b"):
        s = QuotaSettings(1.0, 11, {EntitySpec(None, "job"): {"producer_byte_rate": T}})
        managers.append(QuotaManager(s, 0.0, FleetLedger(name, f"epoch-{name}", 1.0, 11, 1, 0.1)))
    for m in managers:
        m.record_produce(P, 7000, 1, 1, 0.0)
    for m in managers * 2:   # each learns the other's 7000 B
        assert m.fleet is not None
        request = m.fleet.collect(0.1)
        m.fleet.merge(request, store.exchange(request, 0.1), 0.1, 0.1)
    a = managers[0]
    v = only(a.record_produce(P, 1000, 1, 1, 0.2))
    sensor = a.sensor(QuotaType.PRODUCER_BYTE_RATE, QuotaKey("", "job"))
    assert sensor is not None
    fleet, local = sensor.measure(0.2), sensor.local_rate(0.2)
    # This process sent 8000 of the fleet's ~15 000 B (the fleet also counts the others' unseen share):
    # about half, so 1000 B cost it about 2 s; paced at its share, the two send T between them.
    assert v.pace_seconds == pytest.approx(1000 / (T * local / fleet))
    assert 1.6 < v.pace_seconds < 2.2
