"""Consumer groups rebalancing through kqp in front of Apache Kafka, classic and KIP-848.

Group traffic is what kqp passes through on its header alone or reads only for addresses:
FindCoordinator (rewritten), JoinGroup/SyncGroup/Heartbeat/LeaveGroup (classic), and KIP-848's
ConsumerGroupHeartbeat (api 68), which kqp has no schema of its own for and must still advertise and
forward. A producer writes throughout while two members consume, a third joins, and the first
leaves; each member commits every record before taking the next (helpers.group_members).

Asserted: every acknowledged record consumed (no gap in any partition), a record consumed twice only
where the commit after its first consumption did not count (at-least-once, nothing committed twice),
the group's committed offsets at the end equal the partitions' ends, and membership seen to change:
the newcomer gets partitions, the leaver's are taken over, each partition held by one member.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import pytest
from helpers.acked_producer import Acked, BackgroundProducer
from helpers.coordinator import advertised_versions
from helpers.group_members import MEMBERS, Member, Taken, committed_offsets
from helpers.names import unique_group, unique_topic
from helpers.observability import scrape, start_with_metrics
from helpers.topics import create_topic
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("upstream", ["kafka"], indirect=True)]

PARTITIONS = 6
SETTLE = 45.0    # a rebalance's bound here: classic's session is 6 s, KIP-848's heartbeat 0.5 s


def settled(members: Sequence[Member]) -> bool:
    """Every partition held by exactly one of `members`, and each member holds some."""
    held = [p for m in members for p in m.holds]
    return sorted(held) == list(range(PARTITIONS)) and all(m.holds for m in members)


def wait_settled(members: Sequence[Member]) -> None:
    deadline = time.monotonic() + SETTLE
    while not settled(members):
        errors = [e for m in members for e in m.errors]
        assert not errors, f"a member failed: {errors[:3]}"
        assert time.monotonic() < deadline, (
            f"group did not settle within {SETTLE:.0f}s: " + ", ".join(f"{m.name}={sorted(m.holds)}" for m in members))
        time.sleep(0.1)


def wait_consumed(members: Sequence[Member], acked: Sequence[Acked], timeout: float = 30.0) -> None:
    wanted = {a.value for a in acked}
    deadline = time.monotonic() + timeout
    while missing := wanted - {t.value for m in members for t in m.taken}:
        assert time.monotonic() < deadline, (
            f"{len(missing)} of {len(wanted)} records acknowledged but not consumed within {timeout:.0f}s, "
            f"e.g. {sorted(missing)[:5]}; " + ", ".join(f"{m.name} holds {sorted(m.holds)}, took {m.count()}"
                                                       for m in members))
        time.sleep(0.1)


def check_at_least_once(acked: Sequence[Acked], taken: Sequence[Taken]) -> int:
    """No gap, and a record taken twice only after a commit that did not count; the number taken again."""
    ends: dict[int, int] = defaultdict(int)
    for a in acked:
        ends[a.partition] = max(ends[a.partition], a.offset + 1)
    seen: dict[int, set[int]] = defaultdict(set)
    for t in taken:
        seen[t.partition].add(t.offset)
    gaps = {p: sorted(set(range(end)) - seen[p])[:5] for p, end in ends.items() if set(range(end)) - seen[p]}
    assert not gaps, f"offsets never consumed (partition: first missing): {gaps}"
    missing = {a.value for a in acked} - {t.value for t in taken}
    assert not missing, f"acknowledged records never consumed: {sorted(missing)[:5]}"

    by_record: dict[tuple[int, int], list[Taken]] = defaultdict(list)
    for t in sorted(taken, key=lambda t: t.at):
        by_record[(t.partition, t.offset)].append(t)
    again = {k: v for k, v in by_record.items() if len(v) > 1}
    wrong = {k: [t.committed for t in v] for k, v in again.items() if any(t.committed for t in v[:-1])}
    assert not wrong, f"records consumed again although their commit counted: {dict(list(wrong.items())[:5])}"
    return sum(len(v) - 1 for v in again.values())


CASES = [("confluent-kafka", "classic"), ("confluent-kafka", "consumer"), ("mixed", "classic")]


@pytest.mark.parametrize(("clients", "protocol"), CASES, ids=[f"{c}-{p}" for c, p in CASES])
def test_members_join_and_leave_while_a_producer_writes(clients: str, protocol: str, upstream: Upstream,
                                                        kqp: Any) -> None:
    proxy, metrics = start_with_metrics(kqp, upstream, quotas={})
    if protocol == "consumer":
        assert ApiKey.ConsumerGroupHeartbeat in advertised_versions(proxy.bootstrap), \
            "kqp does not advertise ConsumerGroupHeartbeat: KIP-848 clients cannot use it"
    topic, group = unique_topic(f"groups-{protocol}"), unique_group(f"groups-{clients}-{protocol}")
    create_topic(proxy.bootstrap, topic, PARTITIONS)
    # The mixed group: one member of each client, on the assignor all three speak.
    kinds = ["confluent-kafka", "kafka-python", "aiokafka"] if clients == "mixed" else [clients] * 3
    options: dict[str, dict[str, Any]] = {
        "confluent-kafka": {"group.protocol": protocol} if clients != "mixed" else
        {"partition.assignment.strategy": "roundrobin"},
        "kafka-python": {}, "aiokafka": {}}
    first, second, third = (MEMBERS[kind](f"{kind}-{n}", proxy.bootstrap, topic, group, **options[kind])
                            for n, kind in enumerate(kinds, 1))
    producer = BackgroundProducer(proxy.bootstrap, topic, tag="grp", every=0.005).start()
    members = [first, second, third]
    try:
        first.start()
        second.start()
        wait_settled([first, second])
        producer.wait_acked(100)
        third.start()
        wait_settled([first, second, third])
        producer.wait_acked(100)
        first.stop()
        wait_settled([second, third])
        producer.wait_acked(100)
    finally:
        producer.stop()
        try:
            wait_consumed(members, producer.acked)
        finally:
            for m in members:
                m.stop()
    assert not producer.failed, producer.failed[:3]
    errors = [e for m in members for e in m.errors]
    assert not errors, f"members reported errors: {errors[:5]}"
    taken = [t for m in members for t in m.taken]
    retaken = check_at_least_once(producer.acked, taken)

    ends = Counter(a.partition for a in producer.acked)
    assert committed_offsets(proxy.bootstrap, group, topic, PARTITIONS) == {p: ends[p] for p in range(PARTITIONS)}
    # The group's own requests went through kqp: KIP-848's heartbeat, or classic's join.
    api = "ConsumerGroupHeartbeat" if protocol == "consumer" else "JoinGroup"
    assert sum(v for (name, labels), v in scrape(metrics).items()
               if name == "kqp_requests_total" and ("api", api) in labels) > 0, f"no {api} request passed kqp"
    # Membership as the members saw it: the newcomer took partitions over from those already in.
    assert any(kind == "revoked" and parts for _, kind, parts in second.events), "second never gave up a partition"
    print({"clients": clients, "protocol": protocol, "acked": len(producer.acked), "taken": len(taken),
           "taken again": retaken, "events": {m.name: len(m.events) for m in members},
           "failed commits": sum(not t.committed for t in taken)})
