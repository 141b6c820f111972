"""The client side of the Spark-like workloads: many small-batch producers, a consumer group, light load.

A Spark job's Kafka sink is many executors, each a producer with its own client id, writing small
records in small batches over many partitions; its readers are a group reading them back. So:
`spark_produce` runs several librdkafka producers in one client process (1 KB keyed records, 16 KiB
batches, linger 5 ms, acks=all), `spark_consume` several members of one consumer group in threads,
`spark_assign` what Spark's Kafka source does (a consumer per task, `assign()`ed one offset range),
and `light_produce` a trickle (about 200 records/s, linger 0) whose per-record latency is the figure.

Every record carries its id (producer index, sequence) as its key. The producers return the ids the
broker acknowledged; a group member returns each record it read with the log position it read it at.
A rebalance makes a partition's next owner re-read what was read but not committed: those reads are
of a position read before, so they count as redeliveries. The harness checks that every acknowledged
id was read, at exactly one position: an id missing was lost, an id at two positions was written twice.
"""

from __future__ import annotations

import itertools
import struct
import threading
import time
from array import array
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from .workloads import QUIET, Deliveries, percentile

# What a Spark executor's producer looks like to the broker: the Java client's 16 KiB batches and
# acks=all, with the linger Spark jobs set for throughput.
SPARK_PRODUCER = {
    "acks": -1,
    "linger.ms": 5,
    "batch.size": 16_384,
    "compression.type": "none",
    "socket.nagle.disable": True,
    "log_level": 3,
}
ID = struct.Struct(">Q")
OFFSET_BITS = 48   # a read's log position as one integer: partition above, offset below


def record_id(producer: int, seq: int) -> int:
    return producer << 40 | seq


def spark_produce(bootstrap: str, topic: str, first: int, producers: int, seconds: float,
                  record_bytes: int = 1024, warmup_timeout: float = 20.0,
                  conf: dict[str, str] | None = None) -> dict[str, Any]:
    """Producers `first` ... `first + producers - 1` (client ids `spark-executor-N`), writing as fast as
    the path takes them for `seconds`; the acknowledged record ids come back as `acked` and the log
    positions they were acknowledged at as `acked_at` (bytes of uint64, in the same order), and each
    partition's offset after its last acknowledged record as `acked_ends`."""
    acked, acked_at = array("Q"), array("Q")
    acked_ends: dict[int, int] = {}

    def on_record(msg: Any) -> None:
        acked.append(ID.unpack(msg.key())[0])
        partition = msg.partition()
        acked_at.append(partition << OFFSET_BITS | msg.offset())
        acked_ends[partition] = max(acked_ends.get(partition, 0), msg.offset() + 1)

    counts = Deliveries(record_bytes, on_record)

    clients = [Producer({**SPARK_PRODUCER, "bootstrap.servers": bootstrap, "client.id": f"spark-executor-{first + i}",
                         **(conf or {})}) for i in range(producers)]
    value = b"s" * (record_bytes - ID.size)   # the key is the other 8 bytes of the record
    seq = [0] * producers

    def send(i: int) -> None:
        key = ID.pack(record_id(first + i, seq[i]))
        clients[i].produce(topic, value, key, on_delivery=counts)
        seq[i] += 1

    try:
        for i in range(producers):   # warm-up: each producer's path (metadata, connections) is up
            send(i)
        for client in clients:
            client.flush(warmup_timeout)
        if len(acked) < producers:
            raise RuntimeError(f"warm-up: {len(acked)} of {producers} records delivered within {warmup_timeout}s "
                               f"(errors: {counts.errors})")
        counts.open = True
        start = time.monotonic()
        deadline = start + seconds
        while time.monotonic() < deadline:
            for i, client in enumerate(clients):
                for _ in range(64):
                    try:
                        send(i)
                    except BufferError:
                        break
                client.poll(0)
        end = time.monotonic()
        elapsed = end - start
        counts.open = False
        for client in clients:   # what is queued was never sent; what is in flight lands and counts
            client.purge(in_queue=True, in_flight=False)
        for client in clients:
            client.flush(30.0)
    finally:
        for client in clients:
            client.purge()
            client.flush(0)
    return {**counts.figures(elapsed), "acked": acked.tobytes(), "acked_at": acked_at.tobytes(),
            "acked_ends": acked_ends, "window": (start, end)}


def end_offsets(bootstrap: str, topic: str, partitions: int, conf: dict[str, str] | None = None) -> dict[int, int]:
    """Each partition's high watermark, asked of the broker itself."""
    consumer = _side_consumer(bootstrap, "kqp-bench-ends", conf)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def _side_consumer(bootstrap: str, group: str, conf: dict[str, str] | None) -> Consumer:
    """A consumer that never joins `group` (it commits nothing by itself): for looking at the log."""
    return Consumer({**QUIET, "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     **(conf or {})})


def start_group(bootstrap: str, topic: str, group: str, partitions: int,
                conf: dict[str, str] | None = None) -> dict[str, Any]:
    """Commit offset 0 of every partition for `group` before any member joins, so that a member always
    starts a partition from a committed offset. Without one, librdkafka resets a new assignment by
    itself, and once a partition's first batch (15 records, offsets 0-14) went unread through the
    relay, the log holding it: a member that had fetched it before the joins' rebalances started the
    partition after it, as a stale fetch position would."""
    consumer = _side_consumer(bootstrap, group, conf)
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(partitions)], asynchronous=False)
    finally:
        consumer.close()
    return {"partitions": partitions}


class _Member:
    """One group member: reads and commits; keeps every read as its log position and the record's id."""

    def __init__(self, conf: dict[str, Any], topic: str, ends: dict[int, int]) -> None:
        self.topic, self.ends = topic, ends
        self.consumer = Consumer(conf)
        self.positions = array("Q")   # partition << OFFSET_BITS | offset, one per read
        self.ids = array("Q")         # the id of the record read there
        self.bytes = 0
        self.first = self.last = 0.0
        self.errors = 0
        self.rebalances = 0
        self.unread = False           # read since the last commit

    def _commit(self) -> None:
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException:
            pass   # the group moved on: the partition's next owner reads on from the last commit
        self.unread = False

    def _revoked(self, _consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        self._commit()   # while the partitions are still ours, so their next owner re-reads little
        self.rebalances += 1

    def _done(self) -> bool:
        wanted = [TopicPartition(self.topic, p) for p, end in self.ends.items() if end > 0]
        try:
            committed = self.consumer.committed(wanted, timeout=10)
        except KafkaException:
            return False
        return all(tp.offset >= self.ends[tp.partition] for tp in committed)

    def run(self, deadline: float) -> None:
        consumer = self.consumer
        consumer.subscribe([self.topic], on_revoke=self._revoked)
        last_commit = last_check = time.monotonic()
        try:
            while time.monotonic() < deadline:
                messages = consumer.consume(2000, 0.1)
                now = time.monotonic()
                for msg in messages:
                    if msg.error() is not None:
                        self.errors += 1
                        continue
                    self.positions.append(msg.partition() << OFFSET_BITS | msg.offset())
                    self.ids.append(ID.unpack(msg.key())[0])
                    self.bytes += len(msg.value()) + ID.size
                if messages:
                    self.first = self.first or now
                    self.last = now
                    self.unread = True
                if self.unread and now - last_commit > 0.2:
                    self._commit()
                    last_commit = now
                if not messages and not self.unread and now - last_check > 0.5:
                    if self._done():
                        return
                    last_check = now
            raise TimeoutError("the group did not read everything in time")
        finally:
            consumer.close()


def spark_consume(bootstrap: str, topic: str, group: str, ends: dict[int, int], first: int, members: int,
                  timeout: float, conf: dict[str, str] | None = None) -> dict[str, Any]:
    """Members `first` ... of group `group`, each in a thread, reading `topic` until the group has committed
    every partition's end (`ends`). Every read comes back as its log position (`positions`) and the
    record's id (`ids`), both bytes of uint64 in the same order; `distinct_reads` sorts them out."""
    base = {**QUIET, "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "socket.nagle.disable": True, **(conf or {})}
    readers = [_Member({**base, "client.id": f"spark-reader-{first + i}"}, topic, ends) for i in range(members)]
    failures: list[BaseException] = []
    deadline = time.monotonic() + timeout

    def run(member: _Member) -> None:
        try:
            member.run(deadline)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(member,)) for member in readers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} of {members} group members failed: {failures[0]!r}")
    positions, ids = array("Q"), array("Q")
    for member in readers:
        positions.extend(member.positions)
        ids.extend(member.ids)
    started = [m.first for m in readers if m.first]
    if not started:
        raise RuntimeError(f"the group read nothing from {topic}")
    opened, closed = min(started), max(m.last for m in readers)
    return {"first": opened, "last": closed, "window": (opened, closed), "bytes_moved": sum(m.bytes for m in readers),
            "errors": sum(m.errors for m in readers), "rebalances": sum(m.rebalances for m in readers),
            "positions": positions.tobytes(), "ids": ids.tobytes()}


def offset_ranges(ends: dict[int, int], splits: int) -> list[tuple[int, int, int]]:
    """Each partition's [0, end) cut into `splits` ranges of offsets, as Spark plans a batch read's
    tasks (`minPartitions` above the partition count): (partition, from, until), empty ones left out."""
    ranges = []
    for partition, end in sorted(ends.items()):
        cuts = [end * k // splits for k in range(splits + 1)]
        ranges += [(partition, a, b) for a, b in itertools.pairwise(cuts) if b > a]
    return ranges


def spark_assign(bootstrap: str, topic: str, ranges: list[tuple[int, int, int]], query: str, tasks: int,
                 timeout: float, conf: dict[str, str] | None = None) -> dict[str, Any]:
    """Spark's Kafka source reading `ranges` ((partition, from, until) each): one task per range, `tasks`
    at a time (an executor's cores), each a consumer of its own that is `assign()`ed its partition at
    `from` and reads to `until`, then closes. No group is joined, nothing committed; every consumer's
    client id is new (`<query>-task-N`), as a new query's are. Reads come back as in `spark_consume`."""
    base = {**QUIET, "bootstrap.servers": bootstrap, "group.id": f"spark-kafka-source-{query}-executor",
            "enable.auto.commit": False, "socket.nagle.disable": True, **(conf or {})}
    todo = list(enumerate(ranges))
    lock = threading.Lock()
    positions, ids = array("Q"), array("Q")
    tally = {"bytes": 0, "errors": 0, "first": 0.0, "last": 0.0}
    failures: list[BaseException] = []
    deadline = time.monotonic() + timeout

    def task(index: int, partition: int, start: int, until: int) -> None:
        consumer = Consumer({**base, "client.id": f"{query}-task-{index}"})
        mine_at, mine_ids, size, errors = array("Q"), array("Q"), 0, 0
        try:
            consumer.assign([TopicPartition(topic, partition, start)])
            at = start
            while at < until:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"task {index} read {partition}@{start}-{until} only to {at}")
                for msg in consumer.consume(2000, 0.1):
                    if msg.error() is not None:
                        errors += 1
                        continue
                    if msg.offset() >= until:   # the next task's
                        at = until
                        break
                    mine_at.append(partition << OFFSET_BITS | msg.offset())
                    mine_ids.append(ID.unpack(msg.key())[0])
                    size += len(msg.value()) + ID.size
                    at = msg.offset() + 1
        finally:
            consumer.close()
        with lock:
            positions.extend(mine_at)
            ids.extend(mine_ids)
            tally["bytes"] += size
            tally["errors"] += errors

    def worker() -> None:
        while True:
            with lock:
                if not todo or failures:
                    return
                index, (partition, start, until) = todo.pop(0)
            try:
                task(index, partition, start, until)
            except BaseException as exc:
                with lock:
                    failures.append(exc)

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(tasks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(ranges)} tasks failed: {failures[0]!r}")
    return {"first": started, "last": time.monotonic(), "bytes_moved": tally["bytes"], "errors": tally["errors"],
            "tasks": len(ranges), "positions": positions.tobytes(), "ids": ids.tobytes()}


def reading_ends(listed: dict[int, int], acked: dict[int, int]) -> dict[int, int]:
    """Where the group's reading ends in each partition: the broker's end offsets (`listed`), or past
    the last acknowledged record where the broker answered short of it."""
    return {p: max(listed.get(p, 0), acked.get(p, 0)) for p in listed.keys() | acked.keys()}


def distinct_reads(positions: array[int], ids: array[int]) -> tuple[array[int], int]:
    """The ids read at distinct log positions, and how many reads were of a position read before: a
    group redelivers what a member read but did not commit before a rebalance, which is the group's
    at-least-once, not a record written twice. An id at two positions is: it was written twice."""
    at = dict(zip(positions, ids, strict=True))
    return array("Q", at.values()), len(positions) - len(at)


def where_lost(lost: set[int], acked: array[int], acked_at: array[int], positions: array[int],
               ids: array[int]) -> tuple[list[int], int]:
    """Where the `lost` ids were acknowledged (log positions, sorted), and how many of those positions
    the group read holding another record (the upstream acknowledged two records at one position)."""
    read = dict(zip(positions, ids, strict=True))
    at = sorted(position for position, record in zip(acked_at, acked, strict=True) if record in lost)
    return at, sum(1 for position in at if position in read)


def ids_at(bootstrap: str, topic: str, positions: list[int], conf: dict[str, str] | None = None,
           wait: float = 5.0) -> dict[str, Any]:
    """`ids`: the id of the record the upstream holds at each log position (None: none there within
    `wait` seconds), read by a consumer assigned to it directly: did the log keep what the group did
    not read?"""
    consumer = _side_consumer(bootstrap, "kqp-bench-probe", conf)
    found: list[int | None] = []
    try:
        for position in positions:
            partition, offset = position >> OFFSET_BITS, position & ((1 << OFFSET_BITS) - 1)
            consumer.assign([TopicPartition(topic, partition, offset)])
            msg = consumer.poll(wait)
            good = msg is not None and msg.error() is None and msg.offset() == offset
            found.append(ID.unpack(msg.key())[0] if good else None)
    finally:
        consumer.close()
    return {"ids": found}


def light_produce(bootstrap: str, topic: str, seconds: float, rate: float = 200.0, record_bytes: int = 1024,
                  client_id: str = "kqp-bench-light") -> dict[str, Any]:
    """`rate` records a second, sent as they come (linger 0, acks=all, without waiting for the previous
    one); each record's latency from produce() to its acknowledgement."""
    producer = Producer({**QUIET, "bootstrap.servers": bootstrap, "client.id": client_id, "acks": -1,
                         "linger.ms": 0, "socket.nagle.disable": True, "compression.type": "none"})
    samples: list[float] = []
    errors = [0]
    warm = [False]

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors[0] += 1
        elif warm[0]:
            samples.append(msg.latency() * 1000.0)

    value = b"l" * record_bytes
    producer.produce(topic, value, on_delivery=on_delivery)   # warm-up, not timed
    producer.flush(15.0)
    warm[0] = True
    interval = 1.0 / rate
    start = time.perf_counter()
    sent = 0
    while (now := time.perf_counter()) < start + seconds:
        due = start + sent * interval
        if now < due:
            producer.poll(min(due - now, 0.001))   # deliveries are served while waiting for the slot
            continue
        producer.produce(topic, value, on_delivery=on_delivery)
        sent += 1
        producer.poll(0)
    producer.flush(10.0)
    elapsed = time.perf_counter() - start
    if not samples:
        raise RuntimeError(f"no record acknowledged ({errors[0]} errors)")
    samples.sort()
    return {"samples": len(samples), "requests_s": len(samples) / elapsed, "errors": sent - len(samples),
            "p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99), "max_ms": samples[-1]}
