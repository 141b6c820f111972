"""One produce / group-consume / metadata driver per real Kafka client, behind the same three calls.

The transparent-proxy matrix runs one test body over aiokafka, kafka-python, confluent-kafka and
kcat: each has its own protocol implementation (ApiVersions handling, Metadata versions, group
protocol, record batch writer), so each can break kqp differently. Drivers are synchronous (aiokafka
runs in its own `asyncio.run`) so one parametrised test drives them all, and every loop in them
ends at a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer

from .kcat import kcat_metadata, run_kcat
from .net import split_host_port

Message = tuple[str, str]  # (key, value)

# Tansu completes a group join only after about half the session timeout: Kafka's default of 45 s
# would cost 20 s per consumer. 6 s is the smallest a real broker accepts by default
# (group.min.session.timeout.ms).
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_MS = 1000


@dataclass(frozen=True, slots=True)
class Consumed:
    partition: int
    offset: int
    key: str
    value: str


@dataclass(frozen=True)
class ClientDriver:
    name: str
    produce: Callable[[str, str, Sequence[Message]], None]
    consume_group: Callable[..., list[Consumed]]  # (bootstrap, topic, group, count, timeout, **options)
    brokers: Callable[[str], list[tuple[str, int]]]


def keyed_messages(count: int, keys: int = 12, tag: str = "m", start: int = 0) -> list[Message]:
    """`count` messages over `keys` keys; values carry a sequence number (from `start`) for order checks."""
    return [(f"key-{i % keys}", f"{tag}-{i:06d}") for i in range(start, start + count)]


# ---- confluent-kafka (librdkafka 2.x) --------------------------------------------------------

def confluent_produce(bootstrap: str, topic: str, messages: Sequence[Message], **conf: object) -> None:
    errors: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for key, value in messages:
        producer.produce(topic, key=key.encode(), value=value.encode(), on_delivery=delivered)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"confluent producer: {remaining} messages not delivered in 30s"
    assert not errors, f"confluent producer delivery errors: {errors[:5]}"


def confluent_consume(bootstrap: str, topic: str, group: str, count: int, timeout: float,
                      until: Callable[[list[Consumed]], bool] | None = None, **conf: object) -> list[Consumed]:
    """Consume in group `group` until `count` messages (or `until(consumed)` holds) or `timeout` s."""
    done = until or (lambda got: len(got) >= count)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.partition.eof": False,
                         "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                         **conf})
    consumer.subscribe([topic])
    out: list[Consumed] = []
    deadline = time.monotonic() + timeout
    try:
        while not done(out) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out.append(Consumed(msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode()))
    finally:
        consumer.close()
    return out


def confluent_brokers(bootstrap: str) -> list[tuple[str, int]]:
    producer = Producer({"bootstrap.servers": bootstrap})
    metadata = producer.list_topics(timeout=15)
    return [(b.host, b.port) for b in metadata.brokers.values()]


# ---- kafka-python 3 ----------------------------------------------------------------------------

def kafka_python_produce(bootstrap: str, topic: str, messages: Sequence[Message], **options: object) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, **{"linger_ms": 5, **options})
    try:
        futures = [producer.send(topic, key=k.encode(), value=v.encode()) for k, v in messages]
        producer.flush(30)
        for future in futures:
            future.get(timeout=30)  # raises the delivery error, if any
    finally:
        producer.close(timeout=10)


def kafka_python_consume(bootstrap: str, topic: str, group: str, count: int, timeout: float,
                         **options: object) -> list[Consumed]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
                             heartbeat_interval_ms=HEARTBEAT_MS, **options)
    out: list[Consumed] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(Consumed(r.partition, r.offset, r.key.decode(), r.value.decode())
                           for r in records)
    finally:
        consumer.close()
    return out


def kafka_python_brokers(bootstrap: str, timeout_ms: int = 15000) -> list[tuple[str, int]]:
    from kafka import KafkaConsumer

    # The constructor itself bootstraps (to learn the broker version), bounded by bootstrap_timeout_ms.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, bootstrap_timeout_ms=timeout_ms)
    try:
        consumer.bootstrap(timeout_ms=timeout_ms)
        # Cluster metadata as the client stores it (what it would connect to), not a re-query.
        return [(b.host, b.port) for b in consumer._cluster.brokers()]
    finally:
        consumer.close()


# ---- aiokafka ----------------------------------------------------------------------------------

def aiokafka_produce(bootstrap: str, topic: str, messages: Sequence[Message], **options: object) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **{"linger_ms": 5, **options})
        await producer.start()
        try:
            futures = [await producer.send(topic, key=k.encode(), value=v.encode()) for k, v in messages]
            await asyncio.wait_for(asyncio.gather(*futures), 30)
        finally:
            await producer.stop()

    asyncio.run(run())


def aiokafka_consume(bootstrap: str, topic: str, group: str, count: int, timeout: float,
                     **options: object) -> list[Consumed]:
    from aiokafka import AIOKafkaConsumer

    async def run() -> list[Consumed]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
                                    heartbeat_interval_ms=HEARTBEAT_MS, **options)
        await consumer.start()
        out: list[Consumed] = []
        deadline = time.monotonic() + timeout
        try:
            while len(out) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    out.extend(Consumed(r.partition, r.offset, r.key.decode(), r.value.decode())
                               for r in records)
        finally:
            await consumer.stop()
        return out

    return asyncio.run(run())


def aiokafka_brokers(bootstrap: str) -> list[tuple[str, int]]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[tuple[str, int]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            # brokers() falls back to the bootstrap entries (string node ids) before metadata arrives.
            return [(b.host, b.port) for b in producer.client.cluster.brokers() if isinstance(b.nodeId, int)]
        finally:
            await producer.stop()

    return asyncio.run(run())


# ---- kcat (Debian, librdkafka 2.0.2) -----------------------------------------------------------

def kcat_settings(options: Mapping[str, object]) -> list[str]:
    """librdkafka settings as kcat's `-X key=value` arguments."""
    return [arg for key, value in options.items() for arg in ("-X", f"{key}={value}")]


def kcat_produce(bootstrap: str, topic: str, messages: Sequence[Message], **options: object) -> None:
    lines = "".join(f"{k}\t{v}\n" for k, v in messages)
    result = run_kcat(["-b", bootstrap, *kcat_settings(options), "-P", "-t", topic, "-K", "\t",
                       "-X", "linger.ms=5"], input_text=lines, timeout=60)
    assert result.returncode == 0, f"kcat -P failed ({result.returncode}): {result.stderr[-2000:]}"


def kcat_read(bootstrap: str, topic: str, count: int, **options: object) -> list[Message]:
    """The first `count` messages of `topic`, read from the beginning without a group (`-C -e`)."""
    result = run_kcat(["-b", bootstrap, *kcat_settings(options), "-C", "-t", topic, "-o", "beginning",
                       "-c", str(count), "-e", "-f", "%k\t%s\n", "-q"], timeout=60)
    assert result.returncode == 0, f"kcat -C failed ({result.returncode}): {result.stderr[-2000:]}"
    return [tuple(line.split("\t", 1)) for line in result.stdout.splitlines()]  # type: ignore[misc]


def kcat_consume(bootstrap: str, topic: str, group: str, count: int, timeout: float,
                 **options: object) -> list[Consumed]:
    result = run_kcat(["-b", bootstrap, *kcat_settings(options), "-G", group, "-X", "auto.offset.reset=earliest",
                       "-X", f"session.timeout.ms={SESSION_TIMEOUT_MS}",
                       "-X", f"heartbeat.interval.ms={HEARTBEAT_MS}", "-c", str(count),
                       "-f", "%p\t%o\t%k\t%s\n", "-q", topic], timeout=timeout)
    assert result.returncode == 0, f"kcat -G failed ({result.returncode}): {result.stderr[-2000:]}"
    out: list[Consumed] = []
    for line in result.stdout.splitlines():
        partition, offset, key, value = line.split("\t")
        out.append(Consumed(int(partition), int(offset), key, value))
    return out


def kcat_brokers(bootstrap: str) -> list[tuple[str, int]]:
    return [split_host_port(b["name"]) for b in kcat_metadata(bootstrap)["brokers"]]


DRIVERS: dict[str, ClientDriver] = {
    "confluent-kafka": ClientDriver("confluent-kafka", confluent_produce, confluent_consume, confluent_brokers),
    "kafka-python": ClientDriver("kafka-python", kafka_python_produce, kafka_python_consume,
                                 kafka_python_brokers),
    "aiokafka": ClientDriver("aiokafka", aiokafka_produce, aiokafka_consume, aiokafka_brokers),
    "kcat": ClientDriver("kcat", kcat_produce, kcat_consume, kcat_brokers),
}
