"""The Spark-like consume's helpers on a real Tansu: the group's start from committed offsets, and the
probe for records a consumer group never read (what the upstream holds at a position)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from helpers.names import unique_topic
from helpers.topics import create_topic
from upstreams.launch import Upstream

from kqp.proxy.bench.spark_like import ID, OFFSET_BITS, ids_at, start_group

pytestmark = pytest.mark.e2e


def test_the_probe_reads_the_id_at_each_position_and_none_past_the_end(tansu: Upstream) -> None:
    topic = unique_topic("lost-probe")
    create_topic(tansu, topic, 2)
    producer = Producer({"bootstrap.servers": tansu, "linger.ms": 0})
    for record, partition in ((7, 0), (8, 0), (9, 1)):
        producer.produce(topic, b"v", ID.pack(record), partition=partition)
    assert producer.flush(15) == 0
    positions = [0 << OFFSET_BITS | 1, 1 << OFFSET_BITS | 0, 0 << OFFSET_BITS | 0, 1 << OFFSET_BITS | 5]
    assert ids_at(tansu, topic, positions, wait=1.0) == {"ids": [8, 9, 7, None]}


def test_the_group_starts_from_offset_0_committed_for_every_partition(tansu: Upstream) -> None:
    topic, group = unique_topic("group-start"), unique_topic("readers")
    create_topic(tansu, topic, 3)
    assert start_group(tansu, topic, group, 3) == {"partitions": 3}
    reader = Consumer({"bootstrap.servers": tansu, "group.id": group})
    try:
        committed = reader.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    finally:
        reader.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 0), (1, 0), (2, 0)]
