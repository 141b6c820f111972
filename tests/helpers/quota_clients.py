"""Real clients offering far more than their quota, and what each of them reports back.

KIP-219's test plan: a quota far below what the client offers, for long enough to cover many
windows, with the client's request timeout a few seconds. Each producer here offers as fast as it
can for `seconds`, with its own local buffering kept small, so that what is still queued when the
offer ends drains in about a second at the quota: the test measures the proxy, not a backlog. Every
message carries a sequence number, and every producer runs with retries off, so a request that
timed out shows up as a delivery error, never as a silent resend (a duplicate).

Each run reports the largest throttle the client itself recorded, where the client exposes one:
librdkafka's statistics (`brokers.*.throttle`), kafka-python's `throttle-time-max` metric.
aiokafka neither honours nor records `throttle_time_ms` (it has no throttle code at all), which
makes it the client whose rate only kqp's muting can hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

REQUEST_TIMEOUT_MS = 5000       # "the client's request timeout a few seconds"
BATCH_BYTES = 16384             # the Java client's batch.size default: requests of ~16 KB
VALUE_BYTES = 1000
LOCAL_BUFFER_KB = 64            # what may still be queued in the client when the offer ends


def message_value(client_id: str, sequence: int, size: int = VALUE_BYTES) -> bytes:
    head = f"{client_id}-{sequence:08d}-".encode()
    return head + b"x" * max(0, size - len(head))


def value_id(value: bytes) -> str:
    """The `client-sequence` part of a value, what loss and duplicate checks compare."""
    return value.rstrip(b"x").rstrip(b"-").decode()


@dataclass
class ProduceRun:
    client: str
    client_id: str
    started: float = 0.0
    offered_until: float = 0.0          # time.monotonic() when the client stopped offering
    sent: int = 0
    acked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    throttle_seen_ms: float | None = None   # None: the client exposes no throttle measurement
    request_timeouts: int | None = None     # None: the client does not count them


# ---- confluent-kafka (librdkafka) -------------------------------------------------------------

def librdkafka_throttle(stats: list[dict[str, Any]]) -> tuple[float, int]:
    """Largest `brokers.*.throttle.max` over every statistics callback, and total req_timeouts."""
    worst = 0.0
    timeouts = 0
    for snapshot in stats:
        for broker in snapshot.get("brokers", {}).values():
            worst = max(worst, float(broker.get("throttle", {}).get("max", 0)))
    if stats:
        timeouts = sum(int(b.get("req_timeouts", 0)) for b in stats[-1].get("brokers", {}).values())
    return worst, timeouts


@dataclass
class FloodProducer:
    """A confluent-kafka producer configured for a flood, with the statistics it has reported."""

    producer: Producer
    stats: list[dict[str, Any]]


def confluent_producer(bootstrap: str, client_id: str, *, acks: int = -1, **conf: Any) -> FloodProducer:
    stats: list[dict[str, Any]] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "acks": acks,
        "linger.ms": 5, "batch.size": BATCH_BYTES, "queue.buffering.max.kbytes": LOCAL_BUFFER_KB,
        "request.timeout.ms": REQUEST_TIMEOUT_MS, "message.send.max.retries": 0,
        "statistics.interval.ms": 200, "stats_cb": lambda s: stats.append(json.loads(s)), **conf,
    })
    return FloodProducer(producer, stats)


def confluent_flood(bootstrap: str, topic: str, client_id: str, seconds: float, *,
                    acks: int = -1, made: FloodProducer | None = None, offer_bytes_s: float | None = None,
                    partitions: int = 1, first_partition: int = 0, **conf: Any) -> ProduceRun:
    """Flood `topic` for `seconds`, round robin over `partitions` partitions from `first_partition`;
    `made`: a producer already connected (e.g. placed on one worker); `offer_bytes_s`: offer no more
    than this (messages paced), rather than all the quota takes."""
    run = ProduceRun("confluent-kafka", client_id)

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            run.errors.append(str(err))
        else:
            run.acked.append(value_id(msg.value()))

    made = made or confluent_producer(bootstrap, client_id, acks=acks, **conf)
    producer, stats = made.producer, made.stats
    run.started = time.monotonic()
    deadline = run.started + seconds
    while time.monotonic() < deadline:
        if offer_bytes_s is not None and run.sent * VALUE_BYTES > (time.monotonic() - run.started) * offer_bytes_s:
            producer.poll(0.002)       # ahead of the offered rate: wait (serving callbacks meanwhile)
            continue
        try:
            producer.produce(topic, message_value(client_id, run.sent),
                             partition=first_partition + run.sent % partitions, on_delivery=delivered)
            run.sent += 1
        except BufferError:
            producer.poll(0.005)       # the local queue is full: wait for the quota to drain it
        producer.poll(0)
    run.offered_until = time.monotonic()
    remaining = producer.flush(30)
    if remaining:
        run.errors.append(f"{remaining} messages still queued after flush(30)")
    producer.poll(0.5)                 # one more statistics callback after the last response
    run.throttle_seen_ms, run.request_timeouts = librdkafka_throttle(stats)
    return run


# ---- kafka-python ---------------------------------------------------------------------------

@contextlib.contextmanager
def without_client_throttling() -> Iterator[None]:
    """Make kafka-python a pre-KIP-219 client: it still records throttle_time_ms, never backs off.

    kafka-python 3 pauses a connection for a response's throttle_time_ms by itself; clients
    before KIP-219 (and aiokafka today) do not, and only the proxy's muting can hold them.
    """
    from kafka.net.connection import KafkaConnection

    def record_only(self: Any, response: Any) -> None:
        throttle_ms = getattr(response, "throttle_time_ms", 0)
        if self._sensors:
            self._sensors.throttle_time.record(throttle_ms)

    with mock.patch.object(KafkaConnection, "_maybe_throttle", record_only):
        yield


def metric_max(metrics: dict[str, dict[str, float]], name: str) -> float:
    return max((float(v) for group in metrics.values() for k, v in group.items() if k == name and v == v),
               default=0.0)


def kafka_python_flood(bootstrap: str, topic: str, client_id: str, seconds: float, *,
                       acks: int = -1, client_throttling: bool = True, max_messages: int | None = None,
                       before_close: Callable[[], object] | None = None, **options: Any) -> ProduceRun:
    """`before_close` runs with the producer still open: with acks=0, kafka-python reports a
    message sent once its transport has it, and closing then may cut off what the socket has not
    taken yet, so a test that must see every byte arrive waits for that first."""
    from kafka import KafkaProducer

    run = ProduceRun("kafka-python" if client_throttling else "kafka-python (no client throttling)", client_id)
    patch = contextlib.nullcontext() if client_throttling else without_client_throttling()
    with patch:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, client_id=client_id, acks=acks, linger_ms=5,
            batch_size=BATCH_BYTES, max_block_ms=30000,
            request_timeout_ms=REQUEST_TIMEOUT_MS, retries=0, enable_idempotence=False,
            max_in_flight_requests_per_connection=5, **options)
        try:
            futures = []
            limit = LOCAL_BUFFER_KB * 1024 // VALUE_BYTES
            run.started = time.monotonic()
            deadline = run.started + seconds
            while time.monotonic() < deadline and (max_messages is None or run.sent < max_messages):
                # kafka-python 3 has no buffer_memory: bound what is queued by waiting for the
                # oldest unacknowledged message (the result is read again below).
                if run.sent - limit >= 0:
                    with contextlib.suppress(Exception):
                        futures[run.sent - limit].get(timeout=30)
                futures.append(producer.send(topic, message_value(client_id, run.sent), partition=0))
                run.sent += 1
            run.offered_until = time.monotonic()
            producer.flush(30)
            for future in futures:
                try:
                    future.get(timeout=30)
                except Exception as exc:
                    run.errors.append(repr(exc))
            run.acked = [value_id(message_value(client_id, i)) for i, f in enumerate(futures) if f.succeeded()]
            run.throttle_seen_ms = metric_max(producer.metrics(), "throttle-time-max")
            if before_close is not None:
                before_close()
        finally:
            producer.close(timeout=10)
    return run


# ---- aiokafka -------------------------------------------------------------------------------

def aiokafka_flood(bootstrap: str, topic: str, client_id: str, seconds: float, *,
                   acks: int | str = "all", **options: Any) -> ProduceRun:
    from aiokafka import AIOKafkaProducer

    run = ProduceRun("aiokafka", client_id)

    async def flood() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=acks,
                                    linger_ms=5, max_batch_size=BATCH_BYTES,
                                    request_timeout_ms=REQUEST_TIMEOUT_MS, **options)
        await producer.start()
        futures: list[tuple[int, asyncio.Future[Any]]] = []
        try:
            run.started = time.monotonic()
            deadline = run.started + seconds
            while time.monotonic() < deadline:
                # send() waits while the partition's batch is full and undrained.
                futures.append((run.sent, await producer.send(topic, message_value(client_id, run.sent),
                                                                partition=0)))
                run.sent += 1
            run.offered_until = time.monotonic()
            await producer.flush()
            for sequence, future in futures:
                try:
                    await asyncio.wait_for(future, 30)
                    run.acked.append(value_id(message_value(client_id, sequence)))
                except Exception as exc:
                    run.errors.append(repr(exc))
        finally:
            await producer.stop()

    asyncio.run(flood())
    return run


FLOODS = {"confluent-kafka": confluent_flood, "kafka-python": kafka_python_flood, "aiokafka": aiokafka_flood}


def confluent_floods(bootstrap: str, topic: str, client_ids: list[str], seconds: float) -> dict[str, ProduceRun]:
    """One confluent-kafka flood per client id, all at once, each on its own thread; a failure in
    any of them is raised here."""
    runs: dict[str, ProduceRun] = {}
    failures: list[BaseException] = []

    def offer(client_id: str) -> None:
        try:
            runs[client_id] = confluent_flood(bootstrap, topic, client_id, seconds)
        except BaseException as exc:  # reported by the calling thread
            failures.append(exc)

    threads = [threading.Thread(target=offer, args=(cid,)) for cid in client_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 60)
    assert not failures, failures
    assert set(runs) == set(client_ids), "a producer thread did not finish"
    return runs


# ---- reading back -------------------------------------------------------------------------------

def read_partition(bootstrap: str, topic: str, *, partition: int = 0, timeout: float = 30.0) -> list[str]:
    """Value ids of every record in one partition (up to its high watermark), read by assignment."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kqp-test-verify",
                         "enable.auto.commit": False, "client.id": "kqp-test-verify"})
    out: list[str] = []
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        consumer.assign([TopicPartition(topic, partition, low)])
        deadline = time.monotonic() + timeout
        while len(out) < high - low and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out.append(value_id(msg.value()))
    finally:
        consumer.close()
    return out


def preload(bootstrap: str, topic: str, count: int, *, tag: str = "pre", partition: int = 0) -> list[str]:
    """Write `count` records straight to the upstream, fast (no quota on this path)."""
    # Small batches: a broker returns whole batches, so a fetch can only be as fine as they are.
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "kqp-test-preload", "linger.ms": 5,
                         "batch.size": BATCH_BYTES})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, message_value(tag, i), partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"preload: {remaining} records not delivered"
    return [value_id(message_value(tag, i)) for i in range(count)]
