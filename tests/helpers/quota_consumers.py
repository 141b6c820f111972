"""Real consumers reading a preloaded backlog through kqp, and what each reports back.

The backlog is written straight to the upstream first (helpers.quota_clients.preload), so the
consumer is limited only by its consumer_byte_rate: it always has more to fetch than the quota
lets through. A consumer reads by assignment (partition 0 from the beginning, no group) unless a
group is given; with a group it counts every assignment and revocation, which is how a rebalance
shows to an application.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from .quota_clients import REQUEST_TIMEOUT_MS, librdkafka_throttle, metric_max, value_id

SESSION_TIMEOUT_MS = 6000      # the smallest a real broker accepts by default
HEARTBEAT_MS = 1000
PARTITION_FETCH_BYTES = 65536  # per-partition fetch size: responses of ~64 KB, many per window


@dataclass
class ConsumeRun:
    client: str
    client_id: str
    started: float = 0.0
    finished: float = 0.0
    values: list[str] = field(default_factory=list)
    assignments: int = 0
    revocations: int = 0
    throttle_seen_ms: float | None = None


def confluent_drain(bootstrap: str, topic: str, client_id: str, count: int, timeout: float, *,
                    group: str | None = None, partition: int = 0, **conf: Any) -> ConsumeRun:
    run = ConsumeRun("confluent-kafka", client_id)
    stats: list[dict[str, Any]] = []

    def assigned(_consumer: Any, partitions: list[Any]) -> None:
        run.assignments += 1

    def revoked(_consumer: Any, partitions: list[Any]) -> None:
        run.revocations += 1

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "client.id": client_id,
        "group.id": group or f"kqp-test-assign-{client_id}", "enable.auto.commit": group is not None,
        "auto.offset.reset": "earliest", "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
        "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
        "socket.timeout.ms": REQUEST_TIMEOUT_MS, "enable.partition.eof": False,
        "statistics.interval.ms": 200, "stats_cb": lambda s: stats.append(json.loads(s)), **conf,
    })
    if group is None:
        consumer.assign([TopicPartition(topic, partition, 0)])
    else:
        consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    run.started = time.monotonic()
    deadline = run.started + timeout
    try:
        while len(run.values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            run.values.append(value_id(msg.value()))
        run.finished = time.monotonic()
        consumer.poll(0.5)  # one more statistics callback
        run.throttle_seen_ms, _ = librdkafka_throttle(stats)
    finally:
        revocations = run.revocations
        consumer.close()
        run.revocations = revocations  # close() revokes too: that is no rebalance
    return run


def kafka_python_drain(bootstrap: str, topic: str, client_id: str, count: int, timeout: float, *,
                       group: str | None = None, **options: Any) -> ConsumeRun:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.structs import TopicPartition as KTopicPartition

    run = ConsumeRun("kafka-python", client_id)

    class Counting(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned: Any) -> None:
            run.assignments += 1

        def on_partitions_revoked(self, revoked: Any) -> None:
            if revoked:
                run.revocations += 1

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, client_id=client_id, group_id=group, auto_offset_reset="earliest",
        enable_auto_commit=group is not None, max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
        session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
        request_timeout_ms=max(REQUEST_TIMEOUT_MS, SESSION_TIMEOUT_MS + 1000), **options)
    if group is None:
        partition = KTopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
    else:
        consumer.subscribe([topic], listener=Counting())
    run.started = time.monotonic()
    deadline = run.started + timeout
    try:
        while len(run.values) < count and time.monotonic() < deadline:
            # kafka-python sends its next Fetch from inside poll(): a short poll keeps the
            # client from being the bottleneck once a throttle has passed.
            for records in consumer.poll(timeout_ms=20).values():
                run.values.extend(value_id(r.value) for r in records)
        run.finished = time.monotonic()
        run.throttle_seen_ms = metric_max(consumer.metrics(), "throttle-time-max")
    finally:
        revocations = run.revocations
        consumer.close()
        run.revocations = revocations
    return run


def aiokafka_drain(bootstrap: str, topic: str, client_id: str, count: int, timeout: float, *,
                   group: str | None = None, **options: Any) -> ConsumeRun:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATopicPartition

    run = ConsumeRun("aiokafka", client_id)

    async def drain() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, client_id=client_id, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=group is not None, max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
            request_timeout_ms=max(REQUEST_TIMEOUT_MS, SESSION_TIMEOUT_MS + 1000), **options)
        await consumer.start()
        try:
            if group is None:
                partition = ATopicPartition(topic, 0)
                consumer.assign([partition])
                await consumer.seek_to_beginning(partition)
            else:
                consumer.subscribe([topic])
            run.started = time.monotonic()
            deadline = run.started + timeout
            while len(run.values) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    run.values.extend(value_id(r.value) for r in records)
            run.finished = time.monotonic()
        finally:
            await consumer.stop()

    asyncio.run(drain())
    return run


DRAINS = {"confluent-kafka": confluent_drain, "kafka-python": kafka_python_drain, "aiokafka": aiokafka_drain}
