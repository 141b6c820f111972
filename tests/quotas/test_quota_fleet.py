"""Fleet quotas, pure: what a process sends, how it merges the answer, and the throttles that follow.

Every exchange here goes through a `FleetStore` with the clock passed in, so the arithmetic is
checked with plain numbers. Unless a test says otherwise the store's clock equals the processes'
clocks (offset 0), windows are Kafka's defaults (1 s x 11), and the quota T is 1000 B/s.
"""

from __future__ import annotations

import math

import pytest

from kqp.quotas.fleet.ledger import FleetLedger, SensorTotals, SyncReply, sensor_name
from kqp.quotas.fleet.store import FleetStore
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import EntitySpec, Principal, QuotaKey, QuotaSettings

P = Principal("ANONYMOUS", "job")
KEY = QuotaKey("", "job")
T = 1000.0


def settings(quota: str = "producer_byte_rate", limit: float = T, size: float = 1.0, count: int = 11) -> QuotaSettings:
    return QuotaSettings(size, count, {EntitySpec(None, "job"): {quota: limit}})


def ledger(name: str, expected: int = 1, interval: float = 0.1) -> FleetLedger:
    return FleetLedger(name, f"epoch-{name}", 1.0, 11, expected, interval)


def manager(name: str, quota: str = "producer_byte_rate", limit: float = T, expected: int = 1,
            **windows: float) -> QuotaManager:
    s = settings(quota, limit, **windows)
    return QuotaManager(s, 0.0, FleetLedger(name, f"epoch-{name}", s.window_size_seconds, s.window_count,
                                            expected, 0.1))


def sync(store: FleetStore, m: QuotaManager, now: float, store_now: float | None = None) -> SyncReply:
    assert m.fleet is not None
    request = m.fleet.collect(now)
    reply = store.exchange(request, now if store_now is None else store_now)
    m.fleet.merge(request, reply, now, now)
    return reply


def throttle(violations: list) -> float:
    return max((v.throttle_seconds for v in violations), default=0.0)


# -- the ledger alone ---------------------------------------------------------------------------------

def test_usage_is_sent_once_per_window_and_only_once() -> None:
    fleet = ledger("a")
    usage = fleet.usage_for("producer_byte_rate::job", 0.0)
    usage.record(100, 0.2)    # window floor(0.2 s / 1 s) = 0
    usage.record(50, 0.9)     # window 0
    usage.record(25, 1.0)     # window 1
    request = fleet.collect(1.05)
    assert [(s.name, s.deltas) for s in request.sensors] == [("producer_byte_rate::job", ((0, 150.0), (1, 25.0)))]
    assert request.window_ms == 1000 and request.keep_windows == 13
    # what was collected is in flight, not pending: the next exchange only reads the sensor
    assert fleet.collect(1.1).sensors[0].deltas == ()


def test_a_failed_exchange_keeps_its_usage_for_the_next_one() -> None:
    fleet = ledger("a")
    usage = fleet.usage_for("s", 0.0)
    usage.record(100, 0.5)
    fleet.failed(fleet.collect(0.6))
    usage.record(10, 0.7)
    assert fleet.collect(0.8).sensors[0].deltas == ((0, 110.0),)


def test_an_idle_sensor_is_neither_sent_nor_read() -> None:
    fleet = ledger("a")
    usage = fleet.usage_for("s", 0.0)
    usage.record(100, 0.0)
    fleet.collect(0.1)
    # 11 s (the span) after its last local record the sensor drops out of the exchange
    assert [s.name for s in fleet.collect(10.9).sensors] == ["s"]
    assert fleet.collect(11.0).sensors == ()


def test_a_muted_client_keeps_its_sensor_in_the_exchange() -> None:
    # A throttle of 20 s (longer than the 11 s span): the client comes back at 20 s, and its sensor
    # must still know the fleet's usage then, so it stays in the exchange until 20 s + the span.
    m = manager("a")
    assert throttle(m.record_produce(P, 30000, 1, 1, 0.0)) == pytest.approx(20.0)   # 30000 / 1000 - 10
    assert [s.name for s in m.fleet.collect(30.9).sensors] == ["producer_byte_rate::job"]
    assert m.fleet.collect(31.0).sensors == ()


def test_sensor_names_are_unambiguous() -> None:
    assert sensor_name("request_rate", QuotaKey("a:b", "c")) == "request_rate:a%3Ab:c"
    assert sensor_name("request_rate", QuotaKey("a", "b:c")) == "request_rate:a:b%3Ac"
    assert sensor_name("request_rate", QuotaKey("", "<default>")) == "request_rate::%3Cdefault%3E"


def test_the_clock_offset_follows_the_store() -> None:
    store = FleetStore()
    m = manager("a")
    m.record_produce(P, 100, 1, 1, 0.5)
    # The store's clock reads 1000 s more; the exchange took 0.2 s, so the offset is taken at its middle.
    request = m.fleet.collect(0.6)
    reply = store.exchange(request, 1000.7)
    m.fleet.merge(request, reply, 0.6, 0.8)
    assert m.fleet.offset == pytest.approx(1000.0)
    assert m.fleet.window_index(0.9) == 1000   # local 0.9 s is fleet 1000.9 s


# -- two processes, one quota -------------------------------------------------------------------------

def test_two_processes_are_held_to_one_quota() -> None:
    store = FleetStore()
    a, b = manager("a"), manager("b")
    # Each producer's first request: 6000 B at t=0. Alone, each reads 6000 / 10 s = 600 B/s (Kafka
    # counts a fresh sensor as ten windows old): under T, no throttle.
    assert a.record_produce(P, 6000, 1, 1, 0.0) == []
    assert b.record_produce(P, 6000, 1, 1, 0.0) == []
    sync(store, a, 0.1)
    sync(store, b, 0.1)
    sync(store, a, 0.1)
    # Now a sees the fleet: its own 6000 + 100, b's 6000, and b, the one other process active on the
    # sensor, presumed to have used since the exchange what a did (100): 12200 / 10.2 s = 1196 B/s > T.
    # X = (O - T) / T * W = 12200 / 1000 - 10.2 = 2.0 s.
    assert throttle(a.record_produce(P, 100, 1, 1, 0.2)) == pytest.approx(2.0)
    [state] = a.snapshot(0.2)
    assert state.rate == pytest.approx(12200 / 10.2)
    # The next exchange replaces the estimate with what b really did (nothing): 12100 / 10.2 s.
    sync(store, a, 0.2)
    assert a.snapshot(0.2)[0].rate == pytest.approx(12100 / 10.2)


def test_the_others_unseen_usage_is_estimated_by_symmetry() -> None:
    # Three processes active on one sensor: between exchanges each counts the two others as having
    # used what it used itself, so a headroom is filled once by the fleet, not once by each.
    store = FleetStore()
    ms = [manager(n) for n in "abc"]
    for m in ms:
        m.record_produce(P, 1000, 1, 1, 0.0)
    for m in (*ms, *ms):
        sync(store, m, 0.0)
    a = ms[0]
    assert a.fleet.usages["producer_byte_rate::job"].others_active == 2
    # 3000 B seen over 10 s = 300 B/s. a adds 2000: 3000 + 2000 + 2 x 2000 = 9000 / 10.1 s = 891 B/s.
    assert a.record_produce(P, 2000, 1, 1, 0.1) == []
    assert a.snapshot(0.1)[0].rate == pytest.approx(9000 / 10.1)
    # 500 more: (9000 + 3 x 500) / 10.1 = 1040 B/s > T: X = 10500 / 1000 - 10.1 = 0.4 s.
    assert throttle(a.record_produce(P, 500, 1, 1, 0.1)) == pytest.approx(0.4)


def test_instance_scope_would_let_both_through() -> None:
    a, b = QuotaManager(settings(), 0.0), QuotaManager(settings(), 0.0)
    a.record_produce(P, 6000, 1, 1, 0.0)
    b.record_produce(P, 6000, 1, 1, 0.0)
    # each alone: 6100 / 10.2 s = 598 B/s
    assert a.record_produce(P, 100, 1, 1, 0.2) == []


def test_the_others_usage_ages_out_of_the_span_like_a_sample() -> None:
    store = FleetStore()
    a, b = manager("a"), manager("b")
    b.record_produce(P, 20000, 1, 1, 0.5)        # fleet window 0
    sync(store, b, 0.6)
    a.record_produce(P, 1, 1, 1, 0.6)
    sync(store, a, 0.6)
    assert a.snapshot(0.6)[0].rate == pytest.approx(20001 / 10)   # a's first sample: W = 10 s
    # A window counts while it may hold an event younger than the span: window 0 (0 s to 1 s) until
    # 1 s + 11 s. At 11.9 s window 11 is current and 11 - 11 = 0 the oldest kept; Kafka would have
    # purged the sample at 11.5 s (its last event + the span): windows keep usage up to one window longer.
    a.record_produce(P, 1, 1, 1, 11.9)
    sync(store, a, 11.9)
    # a's own sample of 0.6 s is purged (11.6 s), so a's window is Kafka's for a fresh sample:
    # 10 windows + 0 s elapsed = 10 s (the window length is always this process's own).
    assert a.snapshot(11.9)[0].rate == pytest.approx(20001 / 10)
    a.record_produce(P, 1, 1, 1, 12.0)
    sync(store, a, 12.0)
    assert a.snapshot(12.0)[0].rate < 1


# -- when the store is out of reach ---------------------------------------------------------------------

def test_before_the_first_exchange_each_process_takes_its_expected_share() -> None:
    m = manager("a", expected=4)
    # T / 4 = 250 B/s; 3000 B read as 3000 / 10 s = 300 B/s: X = (300 - 250) / 250 * 10 = 2 s.
    assert throttle(m.record_produce(P, 3000, 1, 1, 0.0)) == pytest.approx(2.0)


def test_alone_each_process_takes_the_share_it_last_saw_and_rejoins() -> None:
    store = FleetStore()
    a, b, c = manager("a"), manager("b"), manager("c")
    for m in (a, b, c, a):
        sync(store, m, 0.0)
    assert a.fleet.instances == 3
    request = a.fleet.collect(0.1)
    a.fleet.failed(request)
    assert not a.fleet.shared and a.fleet.scale == pytest.approx(1 / 3)
    # T / 3 = 333.3 B/s; 4000 / 10 s = 400: X = (400 - 333.3) / 333.3 * 10 = 2 s.
    assert throttle(a.record_produce(P, 4000, 1, 1, 0.2)) == pytest.approx(2.0)
    # Back: the usage of the outage reaches the store and the full quota applies to the fleet again.
    sync(store, a, 0.3)
    assert a.fleet.shared
    sync(store, b, 0.3)
    assert b.snapshot(0.3) == [] and b.fleet.usages == {}
    b.record_produce(P, 1, 1, 1, 0.3)
    sync(store, b, 0.3)
    assert b.snapshot(0.3)[0].rate == pytest.approx(4001 / 10)   # b's first sample: W = 10 s


def test_a_store_that_lost_its_data_gets_everything_again() -> None:
    a, b = manager("a"), manager("b")
    store = FleetStore()
    a.record_produce(P, 5000, 1, 1, 0.0)
    sync(store, a, 0.1)
    store = FleetStore()   # Redis restarted empty
    b.record_produce(P, 1, 1, 1, 0.2)
    sync(store, b, 0.2)    # the new store takes b's epoch
    sync(store, a, 0.3)    # a sees a new epoch: its 5000 B are sent again with the next exchange
    sync(store, a, 0.4)
    sync(store, b, 0.4)
    assert b.snapshot(0.4)[0].rate == pytest.approx(5001 / 10.2)   # b's sample began at 0.2 s


# -- KIP-599's bucket, shared as its spending ------------------------------------------------------------

def test_mutation_bucket_replicas_learn_the_others_spending() -> None:
    # KIP-599's example: 5 mutations/s over 100 windows of 1 s, a burst of 500 tokens.
    store = FleetStore()
    a = manager("a", "controller_mutation_rate", 5.0, count=100)
    b = manager("b", "controller_mutation_rate", 5.0, count=100)
    assert a.admit_mutations(P, 560, 0.0) is None          # 500 >= 0: admitted, 500 - 560 = -60
    assert b.mutation_tokens_available(P, 0.0)              # b has not heard of it yet
    assert b.admit_mutations(P, 1, 0.0) is None             # b's replica: 499
    sync(store, a, 0.0)
    sync(store, b, 0.0)
    # b's replica spends a's 560: 499 - 560 = -61 tokens, a throttle of 61 / 5 = 12.2 s
    assert not b.mutation_tokens_available(P, 0.0)
    assert b.admit_mutations(P, 1, 0.0).throttle_seconds == pytest.approx(12.2)
    sync(store, a, 0.0)
    # a's replica: -60 - 1 (b's) = -61 as well
    assert a.admit_mutations(P, 1, 0.0).throttle_seconds == pytest.approx(12.2)
    # Hearing the same totals again spends nothing more.
    sync(store, b, 0.0)
    assert b.snapshot(0.0)[0].tokens == pytest.approx(-61)


def bucket_manager() -> QuotaManager:
    # A token-bucket byte rate (algorithm: token_bucket), one process alone in the fleet: the store
    # keeps window_count + 2 windows, the ledger one fewer. Windows of 1 s x 11: B = 11000 B.
    s = QuotaSettings(1.0, 11, {EntitySpec(None, "job"): {"producer_byte_rate": T}}, algorithm="token_bucket")
    return QuotaManager(s, 0.0, FleetLedger("a", "epoch-a", 1.0, 11, 1, 0.1))


def test_a_replica_is_never_debited_with_its_own_usage_as_it_ages() -> None:
    store, m = FleetStore(), bucket_manager()
    for tick in range(200):                           # 20 s, spending 50 B (T / 2) and exchanging every 0.1 s
        m.record_produce(P, 50, 1, 1, tick / 10)
        sync(store, m, tick / 10)
    # Refill at T = 1000 B/s outruns spending at 500 B/s: the bucket is full but for the last tick's
    # 50 B. Had the store's extra window counted as the others', each 500 B window would be debited
    # again at every exchange while it sits there (10 times): about -20550 B at 19.9 s.
    assert m.snapshot(19.9)[0].tokens == pytest.approx(11000 - 50)


def test_a_replica_is_not_debited_with_its_own_usage_when_the_fleet_clock_steps_back() -> None:
    # The store's clock runs 2 ms ahead, then steps back to 1 ms behind just before 13 s: the exchange
    # at 12.9995 s is collected in window 13 (fleet time 13.0015 s; window 0 leaves the ledger) and
    # merged with window 12 as the current one (fleet time 12.9985 s). Window 0 is still in the store
    # and holds this process's 5000 B, which must not come back as the others'.
    store, m = FleetStore(), bucket_manager()
    m.record_produce(P, 5000, 1, 1, 0.0)              # K = 11000 - 5000 = 6000
    for now in [tick / 10 for tick in range(130)] + [12.9995]:
        m.record_produce(P, 1, 1, 1, now)
        sync(store, m, now, now + 0.002 if now < 12.9995 else now - 0.001)
    # 6000 + 12.9995 s x T of refill, capped at 11000, minus the 1 B of the last tick.
    assert m.snapshot(12.9995)[0].tokens == pytest.approx(10999)


def test_mutation_bucket_alone_refills_at_its_share() -> None:
    m = manager("a", "controller_mutation_rate", 6.0, expected=3, count=10)
    # Share: 6 / 3 = 2 per second, burst 2 x 10 s = 20. 26 spent: -6, repaid at 2/s in 3 s.
    assert m.admit_mutations(P, 26, 0.0) is None
    assert m.admit_mutations(P, 1, 0.0).throttle_seconds == pytest.approx(3.0)


# -- the store ----------------------------------------------------------------------------------------------

def test_store_counts_present_instances_and_drops_old_windows() -> None:
    store = FleetStore()
    fleet = ledger("a")
    fleet.usage_for("s", 0.0).record(1, 0.0)
    reply = store.exchange(fleet.collect(0.0), 0.0)
    assert (reply.instances, [t.windows for t in reply.sensors], reply.epoch) == (1, [{0: 1.0}], "epoch-a.1")
    other = ledger("b")
    other.usage_for("s", 0.0).record(2, 0.5)
    assert store.exchange(other.collect(0.5), 0.5).sensors[0] == SensorTotals({0: 3.0}, 1)
    # Windows 14 - 13 (keep_windows) = 1 and later are kept: window 0 is gone at 14 s; and "a" has
    # been silent past live_ms (1 s).
    other.usage_for("s", 0.0).record(2, 13.5)
    assert store.exchange(other.collect(13.5), 13.5).sensors[0].windows == {0: 3.0, 13: 2.0}
    reply = store.exchange(other.collect(14.0), 14.0)
    assert (reply.instances, reply.sensors) == (1, (SensorTotals({13: 2.0}, 0),))


def test_store_expires_sensors_nobody_writes() -> None:
    store = FleetStore()
    fleet = ledger("a")
    fleet.usage_for("s", 0.0).record(1, 0.0)
    request = fleet.collect(0.0)
    store.exchange(request, 0.0)
    assert store.sensor_count == 1
    store.exchange(fleet.collect(0.0), request.ttl_ms / 1000)   # nothing sent since: expired
    assert store.sensor_count == 0


def test_a_reload_with_new_windows_restarts_sharing() -> None:
    m = manager("a")
    m.record_produce(P, 1, 1, 1, 0.0)
    assert m.fleet.usages
    m.update_settings(settings(size=0.5), 1.0)
    assert m.fleet.usages == {} and m.fleet.window_ms == 500


def test_expired_and_removed_sensors_leave_the_ledger() -> None:
    m = manager("a")
    m.record_produce(P, 1, 1, 1, 0.0)
    assert m.expire(3600.0, 3600.0) == 1
    assert m.fleet.usages == {}
    m.record_produce(P, 1, 1, 1, 3600.0)
    m.update_settings(QuotaSettings(1.0, 11, {EntitySpec(None, "other"): {"producer_byte_rate": T}}), 3600.0)
    assert m.fleet.usages == {}


def test_scale_is_one_while_shared() -> None:
    fleet = ledger("a", expected=2)
    assert fleet.scale == 0.5 and not math.isinf(fleet.divisor)
    store = FleetStore()
    request = fleet.collect(0.0)
    fleet.merge(request, store.exchange(request, 0.0), 0.0, 0.0)
    assert fleet.scale == 1.0 and fleet.instances == 1


CHARGES = {
    "producer_byte_rate": lambda m, now: m.record_produce(P, 5000, 50, 5, now),
    "producer_record_rate": lambda m, now: m.record_produce(P, 5000, 50, 5, now),
    "producer_batch_rate": lambda m, now: m.record_produce(P, 5000, 50, 5, now),
    "consumer_byte_rate": lambda m, now: m.record_fetch(P, 5000, 50, 5, now),
    "consumer_record_rate": lambda m, now: m.record_fetch(P, 5000, 50, 5, now),
    "consumer_batch_rate": lambda m, now: m.record_fetch(P, 5000, 50, 5, now),
    "request_rate": lambda m, now: m.record_request(P, 0.05, now),
    "request_percentage": lambda m, now: m.record_request(P, 0.05, now),
    "controller_mutation_rate": lambda m, now: m.record_mutations(P, 5, now),
}


@pytest.mark.parametrize("quota_type", sorted(CHARGES))
def test_every_quota_type_is_shared(quota_type: str) -> None:
    # What a charges reaches b through one exchange, for every quota type: b's rate doubles.
    store = FleetStore()
    a, b = manager("a", quota_type, limit=1e9), manager("b", quota_type, limit=1e9)
    for m in (a, b):
        CHARGES[quota_type](m, 0.0)
    alone = b.snapshot(0.0)[0].rate
    assert alone > 0
    for m in (a, b):
        sync(store, m, 0.0)
    assert b.snapshot(0.0)[0].rate == pytest.approx(2 * alone)
