"""Fleet quotas, pure, with the store in parts, as a Redis Cluster's slot groups are.

Each part is a `FleetStore` (the spec) holding some of the sensors, with its own epoch; an
exchange goes to every part and the answers are joined, each sensor's totals carrying its part's
epoch, exactly as proxy/runtime/fleet/redis_cluster.py joins its slot groups' answers. A part can
lose its data on its own, and can fail while the others answer. Windows are 1 s x 11, the store's
clock is the processes' (offset 0), and the usage numbers are bytes.
"""

from __future__ import annotations

import dataclasses

import pytest

from kqp.quotas.fleet.ledger import FleetLedger, SensorTotals, SyncReply, SyncRequest
from kqp.quotas.fleet.store import FleetStore

S1, S2 = "producer_byte_rate::one", "producer_byte_rate::two"   # S1 in part 0 (home), S2 in part 1
PART = {S1: 0, S2: 1}


def ledger(name: str) -> FleetLedger:
    return FleetLedger(name, f"epoch-{name}", 1.0, 11, 2, 0.1)


def part_request(request: SyncRequest, part: int) -> SyncRequest:
    return dataclasses.replace(request, sensors=tuple(s for s in request.sensors if PART[s.name] == part))


def answers(parts: list[FleetStore], request: SyncRequest, now: float,
            down: frozenset[int] = frozenset()) -> tuple[SyncReply | None, tuple[SensorTotals | None, ...]]:
    """Each part that is up applies its sensors; the joined reply (None if a part was down) and
    each sensor's totals with its part's epoch (None where its part was down)."""
    by_name: dict[str, SensorTotals] = {}
    home: SyncReply | None = None
    for k, store in enumerate(parts):
        if k in down:
            continue
        reply = store.exchange(part_request(request, k), now)   # part 0 always gets a call: the registry
        home = reply if k == 0 else home
        for sensor, totals in zip(part_request(request, k).sensors, reply.sensors, strict=True):
            by_name[sensor.name] = dataclasses.replace(totals, epoch=reply.epoch)
    sensors = tuple(by_name.get(s.name) for s in request.sensors)
    if down or home is None:
        return None, sensors
    return SyncReply(home.epoch, home.now, home.instances, sensors), sensors   # type: ignore[arg-type]


def sync(parts: list[FleetStore], fleet: FleetLedger, now: float, down: frozenset[int] = frozenset()) -> None:
    request = fleet.collect(now)
    reply, applied = answers(parts, request, now, down)
    if reply is None:
        fleet.failed(request, applied)
    else:
        fleet.merge(request, reply, now, now)


def others(fleet: FleetLedger, name: str) -> float:
    return sum(fleet.usages[name].others.values())


def test_a_part_that_lost_its_data_gets_its_sensors_again_and_no_other() -> None:
    parts = [FleetStore(), FleetStore()]
    a, b = ledger("a"), ledger("b")
    a.usage_for(S1, 0.0).record(5000, 0.0)
    a.usage_for(S2, 0.0).record(300, 0.0)
    sync(parts, a, 0.1)
    parts[1] = FleetStore()   # the shard of part 1 lost its data: S2's 300 B are gone
    for name in (S1, S2):
        b.usage_for(name, 0.2)
    sync(parts, b, 0.2)       # part 1 takes b's epoch proposal; part 0 keeps a's
    assert (others(b, S1), others(b, S2)) == (5000, 0)
    sync(parts, a, 0.3)       # a sees part 1's new epoch: S2's 300 B go again next time, S1's do not
    assert (a.usages[S1].pending, a.usages[S2].pending) == ({}, {0: 300.0})
    sync(parts, a, 0.4)
    sync(parts, b, 0.4)
    # Had S1 been sent again too (one epoch for the whole store), b would read 10000 B there.
    assert (others(b, S1), others(b, S2)) == (5000, 300)


def test_what_the_answering_parts_applied_is_not_sent_again() -> None:
    parts = [FleetStore(), FleetStore()]
    a, b = ledger("a"), ledger("b")
    sync(parts, b, 0.0)
    sync(parts, a, 0.0)
    a.usage_for(S1, 0.0).record(700, 0.1)
    a.usage_for(S2, 0.0).record(40, 0.1)
    sync(parts, a, 0.2, down=frozenset({1}))   # part 1's shard is down: S1 applied, S2 not
    assert not a.shared and a.scale == pytest.approx(1 / 2)   # alone, at its share of 2 instances
    # S1's 700 B are in part 0 already: only S2's 40 B are still to send.
    assert (a.usages[S1].pending, a.usages[S2].pending) == ({}, {0: 40.0})
    sync(parts, a, 0.4)        # healed: S2's 40 B go now, S1's are not added twice
    assert a.shared
    for name in (S1, S2):
        b.usage_for(name, 0.5)
    sync(parts, b, 0.5)
    assert (others(b, S1), others(b, S2)) == (700, 40)


def test_a_failure_without_answers_keeps_everything_for_the_next_exchange() -> None:
    parts = [FleetStore(), FleetStore()]
    a = ledger("a")
    a.usage_for(S1, 0.0).record(700, 0.1)
    a.usage_for(S2, 0.0).record(40, 0.1)
    sync(parts, a, 0.2, down=frozenset({0, 1}))
    assert (a.usages[S1].pending, a.usages[S2].pending) == ({0: 700.0}, {0: 40.0})
