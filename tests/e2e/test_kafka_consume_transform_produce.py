"""Exactly-once consume-transform-produce through kqp in front of Apache Kafka.

A transactional processor reads an input topic in a consumer group, writes one transformed record
per input record to an output topic, and commits its input offsets inside the same transaction
(`send_offsets_to_transaction`: AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit
to the group coordinator; kqp rewrites both coordinators' addresses). One transaction in the middle
is aborted and its input re-read from the committed offsets, as an application does after a failure.

Asserted: a read_committed consumer of the output sees every input record transformed exactly once;
a read_uncommitted one also sees the aborted transaction's records (so an abort did happen); the
group's committed input offsets are the input's ends; every coordinator and broker address the
clients were told is kqp's. Only Kafka filters aborted records; the light upstreams do not.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from helpers.clients import confluent_produce, keyed_messages
from helpers.group_members import committed_offsets
from helpers.names import unique_group, unique_topic
from helpers.net import split_bootstrap
from helpers.quota_path import broker_addresses
from helpers.seen_addresses import ADDRESS_APIS, seen_addresses
from helpers.topics import create_topic
from helpers.wire_tap import WireTap
from upstreams.launch import Upstream

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("upstream", ["kafka"], indirect=True)]

PARTITIONS = 3
RECORDS = 300
BATCH = 40
ABORTED = 3      # the third transaction is aborted


def transform(value: str) -> str:
    return f"out-{value}"


def process(bootstrap: str, source: str, sink: str, group: str) -> tuple[int, int]:
    """Read `source` in `group`, write each record transformed to `sink`, one transaction per poll;
    until every input record is committed. (transactions committed, records written in aborted ones)"""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("ctp-txid"),
                         "linger.ms": 5})
    producer.init_transactions(30)
    consumer.subscribe([source])
    done = Counter[int]()
    transactions, aborted = 0, 0
    deadline = time.monotonic() + 90
    try:
        while sum(done.values()) < RECORDS:
            assert time.monotonic() < deadline, f"processed {sum(done.values())} of {RECORDS} within 90s"
            batch = [m for m in consumer.consume(BATCH, 1.0) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for msg in batch:
                producer.produce(sink, key=msg.key(), value=transform(msg.value().decode()).encode())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            transactions += 1
            if transactions == ABORTED:
                # Written first: an abort purges what the producer has not sent yet, and then the
                # read_uncommitted check would find nothing of the aborted transaction.
                assert producer.flush(30) == 0, "the aborted transaction's records were not all sent"
                producer.abort_transaction(30)
                aborted += len(batch)
                # Start again from what the group committed, as after a crash.
                for tp in consumer.committed(consumer.assignment(), 15):
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                continue
            producer.commit_transaction(30)
            done.update(m.partition() for m in batch)
    finally:
        consumer.close()
    return transactions, aborted


def read_all(bootstrap: str, topic: str, isolation: str, at_least: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("ctp-check"),
                         "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[str] = []
    deadline = time.monotonic() + 30
    try:
        quiet_until = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is None:
                if len(out) >= at_least:   # everything expected is in: wait a moment for anything more
                    quiet_until = quiet_until or time.monotonic() + 1.0
                    if time.monotonic() >= quiet_until:
                        break
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out.append(msg.value().decode())
    finally:
        consumer.close()
    return out


def test_consume_transform_produce_commits_each_record_once(upstream: Upstream, kqp: Any) -> None:
    proxy = kqp(upstream)
    with WireTap("client", keep_frames=ADDRESS_APIS) as tap:
        for address in [split_bootstrap(proxy.bootstrap)[0], *broker_addresses(proxy.bootstrap)]:
            tap.relay(address)
        bootstrap = tap.hops[split_bootstrap(proxy.bootstrap)[0]]
        source, sink, group = unique_topic("ctp-in"), unique_topic("ctp-out"), unique_group("ctp")
        for topic in (source, sink):
            create_topic(bootstrap, topic, PARTITIONS)
        messages = keyed_messages(RECORDS, tag="in")
        confluent_produce(bootstrap, source, messages)

        transactions, aborted = process(bootstrap, source, sink, group)

        committed = read_all(bootstrap, sink, "read_committed", RECORDS)
        assert Counter(committed) == Counter(transform(v) for _, v in messages), \
            "read_committed output is not each input record transformed exactly once"
        everything = read_all(bootstrap, sink, "read_uncommitted", RECORDS + aborted)
        assert aborted > 0 and len(everything) == RECORDS + aborted, \
            f"read_uncommitted saw {len(everything)}, wanted {RECORDS} committed + {aborted} aborted"
        assert committed_offsets(bootstrap, group, source, PARTITIONS) == ends(bootstrap, source)
        foreign = sorted({(s.api_key, s.host, s.port) for s in seen_addresses(tap.responses())
                          if s.address not in set(tap.hops) | {split_bootstrap(h)[0] for h in tap.hops.values()}})
        assert not foreign, f"clients were told of addresses that are not kqp's: {foreign}"
        print({"transactions": transactions, "aborted records": aborted})



def ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's high watermark (the source is not transactional: its record count)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("ctp-ends")})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()
