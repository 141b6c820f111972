"""The client side of each benchmark workload, run with librdkafka (confluent-kafka) clients.

Each function runs inside a client process of its own (the harness calls it through a process pool)
so the clients never share a GIL or a core's time slice accounting with the proxy under test. The
functions take plain values and return plain dicts, which is all that crosses the process boundary.

Throughput is measured over a fixed window after a warm-up (the first delivery or message, so
connection set-up and metadata are not counted) rather than over a fixed volume: a throttled proxy
then costs the benchmark the same time as a fast one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Batched produce as a throughput-minded application would configure it: linger lets batches fill,
# no compression so the bytes measured are the bytes moved.
BATCH_PRODUCER = {
    "acks": 1,
    "linger.ms": 5,
    "batch.size": 1_048_576,
    "compression.type": "none",
    "socket.nagle.disable": True,
    "queue.buffering.max.kbytes": 65_536,
    "log_level": 3,
}
QUIET = {"log_level": 3}  # librdkafka's notices (purges, shutdown) would garble the bench's table

_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)


class Deliveries:
    """A producer's delivery reports counted: every record delivered (`records`, `bytes`: what moved),
    and those delivered while the measured window is `open`. A record purged from the queue after the
    window closed was never sent: not an error. `on_record(msg)` sees each delivered message."""

    def __init__(self, record_bytes: int, on_record: Callable[[Any], None] | None = None) -> None:
        self.record_bytes, self.on_record = record_bytes, on_record
        self.records = self.bytes = self.errors = self.window_records = self.window_bytes = 0
        self.open = False

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            if err.code() not in _PURGED:
                self.errors += 1
            return
        if self.on_record is not None:
            self.on_record(msg)
        self.records += 1
        self.bytes += self.record_bytes
        if self.open:
            self.window_records += 1
            self.window_bytes += self.record_bytes

    def figures(self, elapsed: float) -> dict[str, float]:
        """The window's throughput, and what moved in all (for CPU per GB)."""
        return {"seconds": elapsed, "records": self.window_records, "mb_s": self.window_bytes / elapsed / 1e6,
                "records_s": self.window_records / elapsed, "bytes_moved": self.bytes, "errors": self.errors,
                "window_bytes": self.window_bytes}


def create_topics(bootstrap: str, topics: dict[str, int], timeout: float = 10.0,
                  conf: dict[str, str] | None = None) -> dict[str, Any]:
    """Create each topic with its partition count; a topic that already exists is not an error."""
    admin = AdminClient({**QUIET, "bootstrap.servers": bootstrap, **(conf or {})})
    futures = admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in topics.items()],
                                  operation_timeout=timeout, request_timeout=timeout)
    for future in futures.values():
        try:
            future.result(timeout)
        except Exception as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
    return {"topics": len(topics)}


def produce(bootstrap: str, topic: str, seconds: float, record_bytes: int = 1024,
            client_id: str = "kqp-bench-produce", warmup_timeout: float = 15.0,
            conf: dict[str, str] | None = None) -> dict[str, Any]:
    """Produce `record_bytes` records as fast as the path takes them for `seconds` (`conf`: extra
    client settings, the TLS references' SSL)."""
    delivered = Deliveries(record_bytes)
    stats: list[str] = []
    producer = Producer({**BATCH_PRODUCER, "bootstrap.servers": bootstrap, "client.id": client_id,
                         "statistics.interval.ms": 500, "stats_cb": stats.append, **(conf or {})})
    value = b"k" * record_bytes
    try:
        # Warm-up: one delivered record proves the path (metadata, connection, topic) is up.
        producer.produce(topic, value, on_delivery=delivered)
        producer.flush(warmup_timeout)
        if delivered.records == 0:
            raise RuntimeError(f"warm-up record not delivered within {warmup_timeout}s (errors: {delivered.errors})")
        delivered.open = True
        start = time.monotonic()
        deadline = start + seconds
        while time.monotonic() < deadline:
            for _ in range(500):
                try:
                    producer.produce(topic, value, on_delivery=delivered)
                except BufferError:
                    producer.poll(0.001)
            producer.poll(0)
        end = time.monotonic()
        elapsed = end - start
        delivered.open = False
        # What is still queued was not delivered in the window; what is in flight still counts
        # toward bytes moved (and so CPU per GB) once it lands.
        producer.purge(in_queue=True, in_flight=False)
        producer.flush(10.0)
    finally:
        producer.purge()
        producer.flush(0)
    return {
        **delivered.figures(elapsed),
        **_request_shape(stats[-1] if stats else None),
        "window": (start, end),
    }


def _request_shape(stats_json: str | None) -> dict[str, float]:
    """Mean Produce request size and round trip from librdkafka's statistics.

    A slower path lets more records gather in each batch while the previous request is in flight,
    so a proxy can make the broker's work per byte cheaper; these figures show when that happens.
    """
    if stats_json is None:
        return {}
    brokers = [b for b in json.loads(stats_json).get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
    busiest = max(brokers, key=lambda b: b.get("req", {}).get("Produce", 0), default=None)
    if busiest is None or not busiest.get("req", {}).get("Produce"):
        return {}
    return {"produce_requests": busiest["req"]["Produce"],
            "avg_request_kb": busiest["txbytes"] / max(1, busiest["tx"]) / 1e3,
            "rtt_avg_ms": busiest.get("rtt", {}).get("avg", 0) / 1e3}


def seed(bootstrap: str, topic: str, megabytes: float, record_bytes: int = 1024,
         conf: dict[str, str] | None = None) -> dict[str, Any]:
    """Write `megabytes` of records for the consume workload to read back."""
    producer = Producer({**BATCH_PRODUCER, "bootstrap.servers": bootstrap, "client.id": "kqp-bench-seed",
                         **(conf or {})})
    errors = []
    value = b"s" * record_bytes
    count = int(megabytes * 1e6 / record_bytes)
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(60.0) or errors:
        raise RuntimeError(f"seeding {topic} failed: {len(errors)} errors, first {errors[:1]}")
    return {"records": count, "bytes": count * record_bytes}


def consume(bootstrap: str, topic: str, partitions: int, records: int, seconds: float,
            timeout: float = 60.0, client_id: str = "kqp-bench-consume",
            conf: dict[str, str] | None = None) -> dict[str, Any]:
    """Read `records` records from the start of every partition of `topic`, as fast as possible.

    Reading stops after `seconds` of consuming even if records remain, so that a throttled path
    costs the benchmark no more time than a fast one; `timeout` bounds the wait for the first one.
    """
    consumer = Consumer({
        **QUIET, "bootstrap.servers": bootstrap, "client.id": client_id, "group.id": "kqp-bench",
        "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760, "socket.nagle.disable": True, **(conf or {}),
    })
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen = count = size = errors = 0
    start = None
    hard_deadline = time.monotonic() + timeout
    try:
        while seen < records and time.monotonic() < hard_deadline:
            if start is not None and time.monotonic() - start > seconds:
                break
            for msg in consumer.consume(10_000, 0.2):
                if msg.error() is not None:
                    errors += 1
                    continue
                seen += 1
                if start is None:
                    # Timing starts at the first message: assignment and offset lookup are set-up.
                    start = time.monotonic()
                    continue
                count += 1
                size += len(msg.value())
        end = time.monotonic()
    finally:
        consumer.close()
    if start is None or count == 0:
        raise RuntimeError(f"consumed nothing from {topic} within {timeout}s ({errors} errors)")
    elapsed = end - start
    return {"seconds": elapsed, "records": count, "mb_s": size / elapsed / 1e6,
            "records_s": count / elapsed, "bytes_moved": size, "errors": errors,
            "complete": seen >= records, "window": (start, end), "window_bytes": size}


def latency(bootstrap: str, topic: str, seconds: float, rate: float = 1000.0, record_bytes: int = 100,
            client_id: str = "kqp-bench-latency") -> dict[str, Any]:
    """Small acks=1 produces one at a time, paced at `rate` per second; per-request round trips."""
    producer = Producer({**QUIET, "bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1,
                         "linger.ms": 0, "socket.nagle.disable": True, "compression.type": "none"})
    samples: list[float] = []
    errors = 0
    value = b"l" * record_bytes
    done: list[float] = []  # delivery time of the one request in flight, when it succeeded

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is None:
            done.append(time.perf_counter())

    producer.produce(topic, value, on_delivery=on_delivery)  # warm-up, not timed
    producer.flush(15.0)
    interval = 1.0 / rate
    stuck = 0
    start = time.perf_counter()
    deadline = start + seconds
    slot = start
    while slot < deadline:
        pause = slot - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        done.clear()
        sent = time.perf_counter()
        producer.produce(topic, value, on_delivery=on_delivery)
        producer.flush(5.0)
        if done:
            samples.append((done[0] - sent) * 1000.0)
            stuck = 0
        else:
            errors += 1
            stuck += 1
            if stuck >= 3:  # the path is down; do not spend 5 s per remaining slot finding out
                raise RuntimeError(f"3 produces in a row undelivered after {len(samples)} samples")
        slot = max(slot + interval, sent)  # a late request does not make the next ones burst
    elapsed = time.perf_counter() - start
    producer.flush(5.0)
    if not samples:
        raise RuntimeError("no latency samples")
    samples.sort()
    return {"samples": len(samples), "requests_s": len(samples) / elapsed, "errors": errors,
            "p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99),
            "p999_ms": percentile(samples, 99.9), "max_ms": samples[-1]}


def percentile(ordered: list[float], pct: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    rank = max(1, round(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def service_classes(bootstrap: str, topic: str, seconds: float, stop: float, capacity: float,
                    stream_rate: float = 100_000.0, batch_jobs: int = 4, record_bytes: int = 1000) -> dict[str, Any]:
    """A stream and batch jobs through one pool (the classes workload): a producer `job-stream-1` offers
    `stream_rate` bytes/s in `record_bytes` records from 0 s to `stop`; `batch_jobs` producers
    `job-batch-N` offer without limit (16 kB batches) from 1 s to `seconds`. Measured from delivery
    reports, over 5 s to `stop`: the stream's delivered share of its offer and its delivery latency,
    the batch jobs' rate against `capacity` and its split; then how long after `stop` the batch jobs
    take 0.7 of `capacity` over a second."""
    import threading

    started = time.perf_counter()
    stream_sent: list[float] = []
    stream_done: list[tuple[float, float]] = []   # (offered at, delivered at)
    batch_done: dict[str, list[tuple[float, int]]] = {f"job-batch-{n}": [] for n in range(1, batch_jobs + 1)}
    errors = [0]
    lock = threading.Lock()

    def stream() -> None:
        producer = Producer({**QUIET, "bootstrap.servers": bootstrap, "client.id": "job-stream-1", "linger.ms": 5,
                             "message.timeout.ms": 120_000})
        value, interval = b"s" * record_bytes, record_bytes / stream_rate
        due = time.perf_counter()
        while (now := time.perf_counter()) < started + stop:
            if now >= due:
                def done(err: KafkaError | None, _msg: Any, at: float = now) -> None:
                    with lock:
                        if err is None:
                            stream_done.append((at, time.perf_counter()))
                        else:
                            errors[0] += 1

                producer.produce(topic, value, on_delivery=done)
                stream_sent.append(now)
                due = max(due + interval, now - interval)
            producer.poll(max(0.0, min(0.002, due - time.perf_counter())))
        producer.flush(60.0)

    def batch(client_id: str) -> None:
        producer = Producer({**QUIET, "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                             "batch.size": 16_384, "queue.buffering.max.kbytes": 256, "message.timeout.ms": 120_000})
        value = b"b" * record_bytes
        mine = batch_done[client_id]

        def done(err: KafkaError | None, _msg: Any) -> None:
            with lock:
                if err is None:
                    mine.append((time.perf_counter(), record_bytes))
                elif err.code() not in _PURGED:
                    errors[0] += 1

        time.sleep(1.0)
        while time.perf_counter() < started + seconds:
            try:
                producer.produce(topic, value, on_delivery=done)
            except BufferError:
                producer.poll(0.005)
            producer.poll(0)
        producer.purge(in_queue=True, in_flight=False)
        producer.flush(30.0)

    threads = [threading.Thread(target=stream, daemon=True),
               *(threading.Thread(target=batch, args=(cid,), daemon=True) for cid in batch_done)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 120.0)
    a, b = started + 5.0, started + stop

    def batch_rate(x: float, y: float, who: str | None = None) -> float:
        moved = sum(n for cid, done in batch_done.items() if who in (None, cid) for at, n in done if x <= at < y)
        return moved / (y - x)

    latencies = sorted((d - o) * 1000.0 for o, d in stream_done if a <= o < b)
    offered = sum(1 for at in stream_sent if a <= at < b)
    delivered = sum(1 for _, d in stream_done if a <= d < b)
    total = batch_rate(a, b)
    split = [batch_rate(a, b, cid) / total for cid in batch_done] if total else [0.0]
    back = next((k / 10 + 1.0 for k in range(int((seconds - stop - 1.0) * 10) + 1)
                 if batch_rate(started + stop + k / 10, started + stop + k / 10 + 1.0) >= 0.7 * capacity), None)
    return {"seconds": seconds, "stream_delivered_ratio": delivered / offered if offered else 0.0,
            "stream_p50_ms": percentile(latencies, 50) if latencies else None,
            "stream_p99_ms": percentile(latencies, 99) if latencies else None,
            "batch_share_of_c": total / capacity, "batch_split_min": min(split), "batch_split_max": max(split),
            "recovery_s": back, "errors": errors[0]}
