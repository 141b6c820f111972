"""Body readers on real wire frames: librdkafka's Produce requests and Fetch responses.

kafka-python writes only the codecs whose libraries are installed; librdkafka writes them all. A
confluent-kafka producer (lz4, zstd, gzip, snappy; linger so batches are large) and consumer talk
to librdkafka's mock cluster through the suite's wire tap (``helpers.wire_tap``), which keeps the
Produce and Fetch frames it forwards. Three tiers:

* the saved frames in ``bodies/`` (no sockets): counts must equal the manifest, which recorded
  kafka-python's own shallow batch iteration of each frame when it was captured;
* a live capture: the records counted across every captured Produce request must be exactly the
  messages the producer had delivered, and every Fetch response must agree with kafka-python;
* ``PYTHONPATH=tests python tests/protocol/test_bodies_captured.py`` re-captures and rewrites
  ``bodies/`` (tests/ on the path, as pytest puts it, for ``helpers``).

The tap rewrites the broker's address in every response to its own, or the clients would leave it
for the broker after bootstrap.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from helpers.wire_tap import WireTap
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecords

from kqp.protocol.apis import ApiKey
from kqp.protocol.fetch import fetch_response_counts
from kqp.protocol.headers import parse_request_header, response_body_offset
from kqp.protocol.produce import produce_acks, produce_request_counts
from kqp.protocol.records import RecordCounts

BODIES = Path(__file__).parent / "bodies"


def produce_bodies(tap: WireTap) -> list[tuple[int, bytes]]:
    """(version, body) of every Produce request that passed the tap."""
    out = []
    for r in tap.requests(api_key=ApiKey.Produce):
        assert r.frame is not None
        frame = memoryview(r.frame)
        out.append((r.api_version, bytes(frame[parse_request_header(frame).body_offset:])))
    return out


def fetch_bodies(tap: WireTap) -> list[tuple[int, bytes]]:
    """(version, body) of every Fetch response that passed the tap."""
    out = []
    for r in tap.responses(api_key=ApiKey.Fetch):
        assert r.frame is not None
        frame = memoryview(r.frame)
        out.append((r.api_version, bytes(frame[response_body_offset(ApiKey.Fetch, r.api_version, frame):])))
    return out


def kafka_python_counts(records: bytes | None) -> RecordCounts:
    counts = RecordCounts()
    if records:
        iterator = MemoryRecords(bytes(records))
        while (batch := iterator.next_batch()) is not None:
            counts.batches += 1
            counts.records += batch.records_count if batch.magic == 2 else 1
    return counts


def kafka_python_produce_counts(version: int, body: bytes) -> RecordCounts:
    total = RecordCounts()
    for topic in ProduceRequest.decode(body, version=version).topic_data:
        for partition in topic.partition_data:
            counts = kafka_python_counts(partition.records)
            total.records += counts.records
            total.batches += counts.batches
    return total


def kafka_python_fetch_counts(version: int, body: bytes) -> RecordCounts:
    total = RecordCounts()
    for topic in FetchResponse.decode(body, version=version).responses:
        for partition in topic.partitions:
            counts = kafka_python_counts(partition.records)
            total.records += counts.records
            total.batches += counts.batches
    return total


def capture(codecs: list[str], messages: int = 2000) -> tuple[dict[str, list[tuple[int, bytes]]], dict[str, int]]:
    """Produce ``messages`` per codec and consume them back: (frames by label, delivered by codec)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    cluster = confluent_kafka.Producer({"test.mock.num.brokers": 1, "bootstrap.servers": "unused:9092"})
    broker = next(iter(cluster.list_topics(timeout=10).brokers.values()))
    frames: dict[str, list[tuple[int, bytes]]] = {}
    delivered: dict[str, int] = {}
    with WireTap("capture", keep_frames={ApiKey.Produce, ApiKey.Fetch}) as tap:
        relayed = tap.relay((broker.host, broker.port))
        for codec in codecs:
            topic = f"captured-{codec}"
            before = len(produce_bodies(tap))
            producer = confluent_kafka.Producer({
                "bootstrap.servers": relayed, "compression.type": codec, "linger.ms": 200,
                "batch.num.messages": 100_000, "acks": "all", "enable.idempotence": codec == "zstd",
            })  # fmt: skip
            results: list[bool] = []

            def on_delivery(err: object, _message: object, results: list[bool] = results) -> None:
                results.append(err is None)

            for i in range(messages):
                producer.produce(topic, key=b"k%d" % (i % 13), value=b"value-%06d" % i * 3, on_delivery=on_delivery)
            assert producer.flush(30) == 0, "producer did not drain"
            delivered[codec] = sum(results)
            frames[f"produce-{codec}"] = produce_bodies(tap)[before:]

        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": relayed, "group.id": "captured", "enable.auto.commit": False,
            # Small limits, so that responses end with partial batches.
            "fetch.max.bytes": 20_000, "max.partition.fetch.bytes": 5_000, "message.max.bytes": 10_000,
        })  # fmt: skip
        try:
            partitions = [
                confluent_kafka.TopicPartition(f"captured-{codec}", p, confluent_kafka.OFFSET_BEGINNING)
                for codec in codecs
                for p in cluster.list_topics(f"captured-{codec}", timeout=10).topics[f"captured-{codec}"].partitions
            ]
            consumer.assign(partitions)
            received, deadline = 0, time.monotonic() + 30
            while received < sum(delivered.values()) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    received += 1
            assert received == sum(delivered.values()), (received, delivered)
        finally:
            consumer.close()
        frames["fetch"] = fetch_bodies(tap)
    return frames, delivered


CODECS = ["lz4", "zstd", "gzip", "snappy", "none"]


@pytest.mark.e2e
def test_live_capture_counts_every_delivered_record() -> None:
    frames, delivered = capture(CODECS, messages=1500)
    for codec in CODECS:
        produced = frames[f"produce-{codec}"]
        assert produced, f"no Produce request captured for {codec}"
        total = RecordCounts()
        for version, body in produced:
            counts = produce_request_counts(version, memoryview(body))
            assert counts == kafka_python_produce_counts(version, body)
            assert produce_acks(version, memoryview(body)) == -1
            total.records += counts.records
            total.batches += counts.batches
        assert total.records == delivered[codec] == 1500
        assert total.records > total.batches  # linger made multi-record batches
    fetched = RecordCounts()
    for version, body in frames["fetch"]:
        counts = fetch_response_counts(version, memoryview(body))
        assert counts == kafka_python_fetch_counts(version, body)
        fetched.records += counts.records
    assert fetched.records >= sum(delivered.values())


def _manifest() -> list[dict]:
    path = BODIES / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else []


@pytest.mark.parametrize("entry", _manifest(), ids=lambda e: e["file"])
def test_saved_frames(entry: dict) -> None:
    body = memoryview((BODIES / entry["file"]).read_bytes())
    reader = produce_request_counts if entry["api"] == "produce" else fetch_response_counts
    assert reader(entry["version"], body) == RecordCounts(entry["records"], entry["batches"])


def test_saved_frames_exist() -> None:
    apis = {entry["api"] for entry in _manifest()}
    assert apis == {"produce", "fetch"}, "run this module as a script to capture tests/protocol/bodies/"


def save_fixtures() -> None:
    """Capture and save a few frames per kind, with kafka-python's counts as the manifest."""
    frames, _ = capture(CODECS, messages=300)
    BODIES.mkdir(exist_ok=True)
    manifest = []
    for label, captured in frames.items():
        api = "fetch" if label == "fetch" else "produce"
        with_records = [(v, b) for v, b in captured
                        if (kafka_python_fetch_counts if api == "fetch" else kafka_python_produce_counts)(v, b).records]
        for i, (version, body) in enumerate(with_records[:2] if api == "produce" else with_records[:6]):
            name = f"{label}-v{version}-{i}.bin"
            (BODIES / name).write_bytes(body)
            counts = (kafka_python_fetch_counts if api == "fetch" else kafka_python_produce_counts)(version, body)
            manifest.append({"file": name, "api": api, "version": version, "records": counts.records,
                             "batches": counts.batches})  # fmt: skip
    (BODIES / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"saved {len(manifest)} frames to {BODIES}")


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    save_fixtures()
