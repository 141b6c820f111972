"""Members of one consumer group, each a real client in a thread of its own, that commit every record.

A member processes one record at a time and commits its offset synchronously before the next, the
strictest at-least-once an application can write: a partition's next owner starts at the last
commit, so a record is consumed twice only when the commit after its first consumption did not
count: it failed (the group had moved on), or a rebalance callback ran meanwhile (aiokafka
rebalances in the background, so a commit can succeed in the next generation, after the new owner
read the offset). Records of partitions a member no longer holds are skipped. Each member keeps
what it took, whether its commit counted, and the partitions its rebalance callbacks gave it.

Clients: confluent-kafka (`group.protocol` classic or KIP-848's consumer), kafka-python and
aiokafka (classic). Every loop ends at its stop event; `stop()` closes the client (leaving the group).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from .clients import HEARTBEAT_MS, SESSION_TIMEOUT_MS

POLL_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class Taken:
    partition: int
    offset: int
    value: str
    committed: bool      # the commit right after it succeeded
    at: float


class Member:
    """One group member; `start()`, then `stop()` (bounded); read `taken`, `holds`, `errors`."""

    client = ""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, **options: Any) -> None:
        self.name, self.bootstrap, self.topic, self.group = name, bootstrap, topic, group
        self.options = options
        self.taken: list[Taken] = []
        self.events: list[tuple[float, str, tuple[int, ...]]] = []   # (time, "assigned"/"revoked", partitions)
        self.errors: list[str] = []
        self._holds: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=f"member-{name}", daemon=True)

    # -- what the test reads ----------------------------------------------------------------------
    @property
    def holds(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._holds)

    def count(self) -> int:
        return len(self.taken)

    # -- life -------------------------------------------------------------------------------------
    def start(self) -> Member:
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"member {self.name} did not stop within {timeout}s"

    def _guarded(self) -> None:
        try:
            self.run()
        except Exception as exc:   # reported to the test, which fails on it
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def run(self) -> None:
        raise NotImplementedError

    # -- for the subclasses -------------------------------------------------------------------------
    def assigned(self, partitions: list[int]) -> None:
        with self._lock:
            self._holds.update(partitions)
            self.events.append((time.monotonic(), "assigned", tuple(sorted(partitions))))

    def revoked(self, partitions: list[int]) -> None:
        with self._lock:
            self._holds.difference_update(partitions)
            self.events.append((time.monotonic(), "revoked", tuple(sorted(partitions))))

    def holding(self, partition: int) -> int | None:
        """The rebalance count now if `partition` is held (the record may be processed), else None."""
        with self._lock:
            return len(self.events) if partition in self._holds else None

    def took(self, partition: int, offset: int, value: bytes, committed: bool, since: int) -> None:
        """A record processed while holding its partition at rebalance count `since`; its commit
        counts only if no rebalance callback ran meanwhile."""
        with self._lock:
            counted = committed and since == len(self.events) and partition in self._holds
        self.taken.append(Taken(partition, offset, value.decode(), counted, time.monotonic()))


class ConfluentMember(Member):
    client = "confluent-kafka"

    def run(self) -> None:
        protocol = self.options.get("group.protocol", "classic")
        timing = {"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS} \
            if protocol == "classic" else {}   # under KIP-848 the broker sets both
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 3,
                             **timing, **self.options})
        consumer.subscribe([self.topic], on_assign=lambda _c, ps: self.assigned([p.partition for p in ps]),
                           on_revoke=lambda _c, ps: self.revoked([p.partition for p in ps]),
                           on_lost=lambda _c, ps: self.revoked([p.partition for p in ps]))
        try:
            while not self._stop.is_set():
                msg = consumer.poll(POLL_SECONDS)
                if msg is None:
                    continue
                if msg.error() is not None:
                    self.errors.append(str(msg.error()))
                    continue
                if (since := self.holding(msg.partition())) is None:
                    continue
                try:
                    consumer.commit(message=msg, asynchronous=False)
                    committed = True
                except KafkaException:
                    committed = False
                self.took(msg.partition(), msg.offset(), msg.value(), committed, since)
        finally:
            consumer.close()


class KafkaPythonMember(Member):
    client = "kafka-python"

    def run(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned: Any) -> None:
                member.assigned([tp.partition for tp in assigned])

            def on_partitions_revoked(self, revoked: Any) -> None:
                member.revoked([tp.partition for tp in revoked])

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                                 max_poll_records=50, **self.options)
        consumer.subscribe([self.topic], listener=Listener())
        try:
            while not self._stop.is_set():
                for tp, records in consumer.poll(timeout_ms=int(POLL_SECONDS * 1000)).items():
                    for record in records:
                        if (since := self.holding(tp.partition)) is None:
                            break
                        try:
                            consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "", -1)})
                            committed = True
                        except KafkaError:
                            committed = False
                        self.took(tp.partition, record.offset, record.value, committed, since)
        finally:
            consumer.close()


class AiokafkaMember(Member):
    client = "aiokafka"

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
        from aiokafka.errors import KafkaError

        member = self

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_assigned(self, assigned: Any) -> None:
                member.assigned([tp.partition for tp in assigned])

            async def on_partitions_revoked(self, revoked: Any) -> None:
                member.revoked([tp.partition for tp in revoked])

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                                    **self.options)
        await consumer.start()
        consumer.subscribe([self.topic], listener=Listener())
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=int(POLL_SECONDS * 1000), max_records=50)
                for tp, records in batches.items():
                    for record in records:
                        if (since := self.holding(tp.partition)) is None:
                            break
                        try:
                            await consumer.commit({tp: record.offset + 1})
                            committed = True
                        except KafkaError:
                            committed = False
                        self.took(tp.partition, record.offset, record.value, committed, since)
        finally:
            await consumer.stop()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset of each partition of `topic` (OffsetFetch; -1001: none)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    answer = admin.list_consumer_group_offsets([request])[group].result(15)
    return {tp.partition: tp.offset for tp in answer.topic_partitions}


MEMBERS: dict[str, type[Member]] = {cls.client: cls for cls in (ConfluentMember, KafkaPythonMember, AiokafkaMember)}
