"""Every compression codec through kqp to Apache Kafka, with the records kqp counts from batch headers.

kqp never decompresses: it counts a Produce request's records from each RecordBatch header, and so
charges record quotas whatever the codec. Each client here produces with none, gzip, snappy, lz4 and
zstd through a wire tap in front of kqp, under a `producer_record_rate` quota (far above what is
sent, so nothing is throttled and every record is counted for it). Kafka stores the batches as the
producer compressed them; one consumer reads everything back through kqp.

Asserted per client and codec: the batches on the wire carry that codec (read with kafka-python's
record classes, not kqp's); every record comes back exactly once, byte for byte; kqp's
`kqp_records_total` for the producer equals the records the tap saw and the records sent, and for
the consumer the records it read.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from helpers.clients import aiokafka_produce, confluent_produce, kafka_python_produce
from helpers.names import unique_group, unique_topic
from helpers.net import split_bootstrap
from helpers.observability import sample, scrape, start_with_metrics
from helpers.quota_path import broker_addresses
from helpers.topics import create_topic
from helpers.wire_tap import WireTap
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecords
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("upstream", ["kafka"], indirect=True)]

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}   # RecordBatch attributes & 0x7
PER_CODEC = 300
PARTITIONS = 2
QUOTAS = {"entities": [{"client_id": "<default>", "producer_record_rate": 10_000_000,
                        "consumer_record_rate": 10_000_000}]}


def produce(client: str, bootstrap: str, topic: str, codec: str, client_id: str,
            messages: list[tuple[str, str]]) -> None:
    if client == "confluent-kafka":
        confluent_produce(bootstrap, topic, messages, **{"compression.type": codec, "client.id": client_id,
                                                          "linger.ms": 20})
        return
    options: dict[str, Any] = {"compression_type": None if codec == "none" else codec, "client_id": client_id,
                               "linger_ms": 20}
    (kafka_python_produce if client == "kafka-python" else aiokafka_produce)(bootstrap, topic, messages, **options)


def codecs_on_the_wire(tap: WireTap, client_id: str) -> Counter[int]:
    """Record batches per compression type in the Produce requests `client_id` sent."""
    seen: Counter[int] = Counter()
    for request in tap.requests(client_id=client_id, api_key=ApiKey.Produce):
        assert request.frame is not None
        decoded = ProduceRequest.decode(request.frame[4:], version=request.api_version, header=True)
        for topic in decoded.topic_data:
            for partition in topic.partition_data:
                for batch in MemoryRecords(bytes(partition.records or b"")):
                    seen[batch.compression_type] += 1
    return seen


def read_back(bootstrap: str, topic: str, count: int, client_id: str) -> list[tuple[str, str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("codecs"), "client.id": client_id,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[tuple[str, str]] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < count and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                out.append((msg.key().decode(), msg.value().decode()))
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_every_codec_round_trips_and_every_record_is_counted(client: str, upstream: Upstream, kqp: Any) -> None:
    proxy, metrics = start_with_metrics(kqp, upstream, quotas=QUOTAS)
    with WireTap("client", keep_frames={ApiKey.Produce}) as tap:
        for address in [split_bootstrap(proxy.bootstrap)[0], *broker_addresses(proxy.bootstrap)]:
            tap.relay(address)
        bootstrap = tap.hops[split_bootstrap(proxy.bootstrap)[0]]
        topic = unique_topic(f"codecs-{client}")
        create_topic(bootstrap, topic, PARTITIONS)
        sent: dict[str, list[tuple[str, str]]] = {}
        for codec in CODECS:
            # Compressible values, several records per batch (linger), keys over both partitions.
            sent[codec] = [(f"k{i % 7}", f"{client}-{codec}-{i:05d}-" + "payload " * 20) for i in range(PER_CODEC)]
            produce(client, bootstrap, topic, codec, f"codec-{client}-{codec}", sent[codec])
        total = sum(len(m) for m in sent.values())
        back = read_back(bootstrap, topic, total, f"codec-reader-{client}")

        samples = scrape(metrics)
        report = {}
        for codec, compression in CODECS.items():
            client_id = f"codec-{client}-{codec}"
            wire = codecs_on_the_wire(tap, client_id)
            assert set(wire) == {compression}, f"{codec}: batches on the wire had compression types {dict(wire)}"
            got = [m for m in back if m[1].startswith(f"{client}-{codec}-")]
            assert Counter(got) == Counter(sent[codec]), f"{codec}: records did not come back exactly once"
            on_wire = sum(r.records for r in tap.requests(client_id=client_id, api_key=ApiKey.Produce))
            counted = sample(samples, "kqp_records_total", direction="produce", user="ANONYMOUS", client_id=client_id)
            assert counted == on_wire == PER_CODEC, f"{codec}: kqp counted {counted}, the wire carried {on_wire}, " \
                                                    f"{PER_CODEC} were sent"
            report[codec] = sum(wire.values())
        fetched = sample(samples, "kqp_records_total", direction="fetch", user="ANONYMOUS",
                         client_id=f"codec-reader-{client}")
        assert len(back) == total and fetched == total, f"read {len(back)} of {total}; kqp counted {fetched} fetched"
        print({"client": client, "batches per codec": report})
