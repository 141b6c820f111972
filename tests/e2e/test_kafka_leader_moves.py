"""Leadership moving under a producer and a consumer group through kqp, on three Apache Kafka nodes.

The topic has replication factor 3 and min.insync.replicas 2, so acks=all writes go on while one
node is down. An idempotent acks=all producer and a group consumer run through a wire tap in front
of kqp (client -> tap -> kqp -> Kafka) while the node leading partition 0 is SIGKILLed: its
partitions' leadership moves, kqp's listener for the dead node refuses to serve, and the clients
find the new leaders through kqp. The node is restarted and the preferred leaders elected through
kqp, which moves leadership back: the old leaders, still alive, answer NOT_LEADER_OR_FOLLOWER with
KIP-951's CurrentLeader and NodeEndpoints hints, which kqp must rewrite like any Metadata answer.

Asserted: every message acknowledged, the log holds each exactly once in producer order per
partition (idempotence across the leader changes), the consumer missed nothing, kqp's bootstrap
listener turned no client away while a node was down, the restarted node's partitions take writes
through kqp again, and every broker address the tap saw handed to a client is kqp's (or the tap's
own hop in front of kqp), never a Kafka listener.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers.acked_producer import BackgroundProducer
from helpers.checks import assert_exactly_once_in_order
from helpers.clients import Consumed
from helpers.group_members import ConfluentMember
from helpers.names import unique_group, unique_topic
from helpers.net import split_bootstrap
from helpers.quota_path import broker_addresses
from helpers.seen_addresses import ADDRESS_APIS, seen_addresses
from helpers.topics import partition_leaders
from helpers.wire_tap import WireTap
from upstreams.kafka import KafkaCluster
from upstreams.provisioned import kafka_or_skip

from kqp.protocol.apis import ApiKey

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("kafka-3-nodes")]

PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with kafka_or_skip(tmp_path_factory.mktemp("kafka3"), nodes=3, properties={"min.insync.replicas": "2"}) as c:
        yield c


def wait_until(what: str, check: Any, timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(interval)
    return result


def read_log(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[Consumed]:
    """The topic's records from the start of every partition, without a group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("leader-moves-check"),
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: list[Consumed] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out.append(Consumed(msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode()))
        time.sleep(0.5)   # anything more (a duplicate) would arrive now
        while (msg := consumer.poll(0.5)) is not None:
            if msg.error() is None:
                out.append(Consumed(msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode()))
    finally:
        consumer.close()
    return out


def elect_preferred(bootstrap: str, topic: str) -> None:
    from confluent_kafka import ElectionType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    future.result(15)


def test_leadership_moves_under_an_idempotent_producer_and_a_group(cluster: KafkaCluster, kqp: Any,
                                                                  tmp_path: Path) -> None:
    proxy = kqp(cluster.bootstrap)
    with WireTap("client", keep_frames=ADDRESS_APIS) as tap:
        tap.relay(proxy.bootstrap)
        for address in broker_addresses(proxy.bootstrap):
            tap.relay(address)
        bootstrap = tap.hops[split_bootstrap(proxy.bootstrap)[0]]
        topic = unique_topic("leader-moves")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, replication_factor=3)])[topic].result(30)
        leaders = wait_until("the topic has leaders", lambda: (found := partition_leaders(bootstrap, topic))
                             and all(v >= 0 for v in found.values()) and found, 30)
        victim = leaders[0]
        moved = {p for p, node in leaders.items() if node == victim}

        # 50 messages a second: what a member committing every record keeps up with here.
        producer = BackgroundProducer(bootstrap, topic, tag="lm", every=0.02,
                                      **{"client.id": "leader-moves-producer"}).start()
        reader = ConfluentMember("leader-moves-consumer", bootstrap, topic, unique_group("leader-moves")).start()
        try:
            producer.wait_acked(60, moved)
            cluster.kill(victim)
            killed_at = len(producer.acked)
            new = wait_until("leadership moved off the killed node", lambda: (
                found := partition_leaders(bootstrap, topic)) and all(
                    found[p] not in (victim, -1) for p in moved) and found, 30)
            producer.wait_acked(60, moved)   # the moved partitions take writes again

            cluster.restart(victim)
            # The restarted node rejoins the ISR, then takes back the partitions it prefers.
            wait_until("the restarted node leads again", lambda: _elected(bootstrap, topic, victim), 60, 1.0)
            back = {p for p, node in partition_leaders(bootstrap, topic).items() if node == victim}
            producer.wait_acked(60, back)
        finally:
            producer.stop()
        try:
            # A group's commits wait for its coordinator: when that node dies the consumer stalls
            # until the client finds the new one (~16 s here, the same without kqp), then catches up.
            stopped = time.monotonic()
            wait_until("the group consumer caught up", lambda: {a.value for a in producer.acked}
                       <= {t.value for t in reader.taken}, 60, 0.5)
            caught_up = time.monotonic() - stopped
        finally:
            reader.stop()
        # The bootstrap listener passes over the dead broker: no new client was turned away meanwhile.
        refused = [line for line in proxy.log_lines() if "on bootstrap: upstream" in line]
        assert not refused, f"kqp's bootstrap listener refused clients while a broker was down: {refused[:3]}"
        assert not producer.failed, f"delivery errors: {producer.failed[:5]}"
        assert len(producer.acked) == producer.sent
        sent = [(a.key, a.value) for a in producer.acked]

        log = read_log(bootstrap, topic, len(sent))
        assert_exactly_once_in_order(sent, log)
        missed = {v for _, v in sent} - {t.value for t in reader.taken}
        assert not missed, f"the group consumer missed {len(missed)} messages, e.g. {sorted(missed)[:5]}"

        seen = seen_addresses(tap.responses())
        ours = set(tap.hops) | {tuple(split_bootstrap(hop)[0]) for hop in tap.hops.values()}
        foreign = sorted({(s.api_key, s.host, s.port) for s in seen if s.address not in ours})
        assert not foreign, f"clients were told of addresses that are not kqp's: {foreign}"
        hints = [s for s in seen if s.api_key in (ApiKey.Produce, ApiKey.Fetch)]
        report = {"killed": victim, "moved": sorted(moved), "new leaders": new, "after kill": killed_at,
                  "caught up after": round(caught_up, 1),
                  "sent": len(sent), "group duplicates": len(reader.taken) - len({t.value for t in reader.taken}),
                  "group errors": reader.errors[:3],
                  "addresses": len(seen), "KIP-951 hints": sorted({(s.api_key, s.api_version) for s in hints})}
        print(report)
        assert hints, "no Produce or Fetch answer carried NodeEndpoints: the leader hints went unchecked"


def _elected(bootstrap: str, topic: str, node: int) -> bool:
    try:
        elect_preferred(bootstrap, topic)
    except Exception:   # the node is not back in the ISR yet: PREFERRED_LEADER_NOT_AVAILABLE
        pass
    return node in partition_leaders(bootstrap, topic).values()
