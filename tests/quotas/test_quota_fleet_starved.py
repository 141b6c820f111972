"""Fleet quotas when a process is late: a client new to it, an exchange still on the wire, a stale view.

Issue 20: a fleet test measured 1.43 Q on a busy machine. What a process does not know is what the
others did since its last exchange, and a busy machine stretches exactly that: a client that starts
late (its process has never exchanged its sensor), a reply read late, a loop that ran nothing for a
second. Each case here is the arithmetic of one such moment, with the store's clock passed in; the
simulated fleet under stalls is in test_quota_fleet_sim.py. Windows are Kafka's defaults (1 s x 11),
the quota T is 1000 B/s, the sync interval 0.1 s and the driver's timeout 0.25 s, unless a test says.
"""

from __future__ import annotations

import pytest

from kqp.quotas.fleet.ledger import FleetLedger, SensorTotals, SyncReply
from kqp.quotas.fleet.store import FleetStore
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import EntitySpec, Principal, QuotaSettings

P = Principal("ANONYMOUS", "job")
T = 1000.0
SENSOR = "producer_byte_rate::job"


def manager(name: str, expected: int = 1) -> QuotaManager:
    settings = QuotaSettings(1.0, 11, {EntitySpec(None, "job"): {"producer_byte_rate": T}})
    return QuotaManager(settings, 0.0, FleetLedger(name, f"epoch-{name}", 1.0, 11, expected, 0.1, timeout=0.25))


def sync(store: FleetStore, m: QuotaManager, now: float) -> None:
    assert m.fleet is not None
    request = m.fleet.collect(now)
    m.fleet.merge(request, store.exchange(request, now), now, now)


def throttle(violations: list) -> float:
    return max((v.throttle_seconds for v in violations), default=0.0)


def three(store: FleetStore) -> list[QuotaManager]:
    """Three processes that have seen each other (no sensor yet): each counts 3 instances."""
    ms = [manager(n) for n in "abc"]
    for m in (*ms, *ms):
        sync(store, m, 0.0)
    assert all(m.fleet is not None and m.fleet.instances == 3 for m in ms)
    return ms


def test_a_client_new_to_a_process_counts_the_others_until_it_hears_from_them() -> None:
    store = FleetStore()
    a, b, _ = three(store)
    b.record_produce(P, 9000, 1, 1, 0.5)
    for m in (b, a):
        sync(store, m, 0.5)
    # a's first client of the sensor: a has never exchanged it, so it knows nothing of b's 9000 B.
    # It counts the two other processes present as using the sensor as much as itself:
    # 4000 + 2 x 4000 = 12000 B over a fresh sample's 10 s = 1200 B/s > T, X = 12000 / 1000 - 10 = 2 s.
    # (Counting nobody, 4000 / 10 s = 400 B/s passed: each late joiner brought its own first burst.)
    # The guess is muted only until the next exchange can replace it: 0.1 s.
    assert throttle(a.record_produce(P, 4000, 1, 1, 0.5)) == pytest.approx(0.1)
    sync(store, a, 0.6)
    # Now a knows: b's 9000 and its own 4000 over 10.1 s, b the one other process active.
    assert a.fleet.usages[SENSOR].others_active == 1
    assert a.snapshot(0.6)[0].rate == pytest.approx(13000 / 10.1)
    # Its next request is judged on that: (13000 + 100 + 100 for b) / 10.1 s > T,
    # X = 13200 / 1000 - 10.1 = 3.1 s, no longer capped.
    assert throttle(a.record_produce(P, 100, 1, 1, 0.6)) == pytest.approx(3.1)


def test_a_lone_client_gets_its_first_burst_after_one_exchange() -> None:
    store = FleetStore()
    a, _, _ = three(store)
    # a's guess (two others as busy as itself) costs its first request one sync interval, no more:
    assert throttle(a.record_produce(P, 4000, 1, 1, 0.0)) == pytest.approx(0.1)
    sync(store, a, 0.1)
    # Nobody else uses the sensor: 4000 + 5000 over 10.1 s = 891 B/s, under T.
    assert a.record_produce(P, 5000, 1, 1, 0.1) == []


def test_a_sensor_back_from_idle_counts_the_others_again() -> None:
    store = FleetStore()
    a, b, c = three(store)
    a.record_produce(P, 100, 1, 1, 0.0)
    sync(store, a, 0.0)
    sync(store, a, 0.0)
    assert a.fleet.usages[SENSOR].others_active == 0
    # Idle for a span (11 s): a drops the sensor from the exchange and forgets the others' usage;
    # meanwhile b uses it. a's client returns: until a's next exchange it counts the others again.
    b.record_produce(P, 9000, 1, 1, 12.0)
    for m in (a, b, c, a):
        sync(store, m, 12.0)
    assert a.fleet.collect(12.0).sensors == ()
    # 3000 + 2 x 3000 over 10 s = 900 B/s: under T, but no longer the 300 B/s that counted nobody.
    assert a.record_produce(P, 3000, 1, 1, 12.1) == []
    assert a.snapshot(12.1)[0].rate == pytest.approx(9000 / 10)


def test_usage_on_the_wire_still_counts_for_the_others() -> None:
    store = FleetStore()
    a, b = manager("a"), manager("b")
    for m in (a, b):
        m.record_produce(P, 1000, 1, 1, 0.0)
    for m in (a, b, a):
        sync(store, m, 0.0)
    a.record_produce(P, 2000, 1, 1, 0.05)
    # The exchange that carries a's 2000 B is under way: until its answer, b is still presumed to have
    # used as much since a's previous exchange: 1000 + 2000 (own) + 1000 (b) + 2000 (b, presumed).
    request = a.fleet.collect(0.1)
    assert a.snapshot(0.2)[0].rate == pytest.approx(6000 / 10.2)
    # (Dropping the presumption at `collect` read 4000 / 10.2 s for as long as the reply took.)
    a.fleet.merge(request, store.exchange(request, 0.1), 0.1, 0.2)
    assert a.snapshot(0.2)[0].rate == pytest.approx(4000 / 10.2)   # b really used nothing more


def test_a_stale_view_of_the_fleet_holds_the_process_to_its_share() -> None:
    store = FleetStore()
    a, b, c = three(store)
    for m in (b, c):
        m.record_produce(P, 1, 1, 1, 0.0)
    a.record_produce(P, 1, 1, 1, 0.0)
    sync(store, a, 0.0)
    assert a.fleet.shared and a.fleet.stale_after == pytest.approx(0.45)   # 2 x 0.1 + 0.25 s
    # a's loop ran nothing for a second, its exchange task included: the fleet's usage it knows is a
    # second old. Its client's next request is judged as if the store were unreachable: T / 3.
    # (1 + 3500) / 10 s = 350 B/s > 333.3: X = (350.1 - 333.3) / 333.3 * 10 = 0.5 s.
    assert throttle(a.record_produce(P, 3500, 1, 1, 1.0)) == pytest.approx(0.5, abs=0.01)
    assert not a.fleet.shared and a.fleet.scale == pytest.approx(1 / 3)
    sync(store, a, 1.0)   # the next exchange brings the fleet back
    assert a.fleet.shared and a.fleet.scale == 1.0


def test_a_reply_read_late_does_not_move_the_clock_offset() -> None:
    fleet = FleetLedger("a", "epoch-a", 1.0, 11, 1, 0.1)

    def merge(sent: float, received: float, store_now: float, epoch: str = "e") -> None:
        request = fleet.collect(sent)
        fleet.merge(request, SyncReply(epoch, store_now, 1, ()), sent, received)

    # A quick exchange: the store read 1000.001 s 1 ms after local 0 s: offset 1000.0005 s.
    merge(0.0, 0.002, 1000.001)
    assert fleet.offset == pytest.approx(1000.0)
    # A reply the store sent at once but the loop read 0.5 s late: taken at its middle it would
    # say 1001.001 - 1.25 = 999.751, a quarter of a window off. The quickest of the last 8 stands.
    merge(1.0, 1.5, 1001.001)
    assert fleet.offset == pytest.approx(1000.0)
    # Another store (its epoch is new) may have another clock: its first reading counts at once.
    merge(2.0, 2.002, 2002.001, epoch="f")
    assert fleet.offset == pytest.approx(2000.0)


def test_store_totals_for_a_sensor_nobody_else_uses_leave_it_heard() -> None:
    # The store's answer that nobody else uses the sensor (others_active 0) is knowledge, not a guess.
    fleet = FleetLedger("a", "epoch-a", 1.0, 11, 1, 0.1)
    request = fleet.collect(0.0)
    fleet.merge(request, SyncReply("e", 0.0, 3, ()), 0.0, 0.0)   # three instances present
    usage = fleet.usage_for(SENSOR, 0.0)
    usage.record(100, 0.0)
    assert usage.remote(0.0) == pytest.approx(200)   # not heard yet: 2 others x 100
    request = fleet.collect(0.0)
    fleet.merge(request, SyncReply("e", 0.0, 3, (SensorTotals({0: 100.0}, 0),)), 0.0, 0.0)
    usage.record(100, 0.05)
    assert usage.remote(0.05) == 0.0
