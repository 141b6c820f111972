"""Body readers on real wire frames: librdkafka's Produce requests and Fetch responses.

kafka-python writes only the codecs whose libraries are installed; librdkafka writes them all. A
confluent-kafka producer (lz4, zstd, gzip, snappy; linger so batches are large) and consumer talk
to librdkafka's mock cluster through ``CaptureRelay``, a tiny relay that keeps the bodies of the
frames it forwards. Three tiers:

* the saved frames in ``bodies/`` (no sockets): counts must equal the manifest, which recorded
  kafka-python's own shallow batch iteration of each frame when it was captured;
* a live capture: the records counted across every captured Produce request must be exactly the
  messages the producer had delivered, and every Fetch response must agree with kafka-python;
* ``python tests/protocol/test_bodies_captured.py`` re-captures and rewrites ``bodies/``.

The relay rewrites broker addresses in Metadata and FindCoordinator responses to its own, or the
clients would leave it for the broker after bootstrap.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecords

from kqp.protocol.fetch import fetch_response_counts
from kqp.protocol.produce import produce_acks, produce_request_counts
from kqp.protocol.records import RecordCounts

BODIES = Path(__file__).parent / "bodies"
PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS = 0, 1, 3, 10, 18
_REWRITTEN = {METADATA: MetadataResponse, FIND_COORDINATOR: FindCoordinatorResponse}
_FLEXIBLE_REQUEST = {PRODUCE: ProduceRequest}
_FLEXIBLE_RESPONSE = {FETCH: FetchResponse, **_REWRITTEN}


def _skip_tags(buf: bytes, pos: int) -> int:
    def uvarint(pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7

    count, pos = uvarint(pos)
    for _ in range(count):
        _, pos = uvarint(pos)
        size, pos = uvarint(pos)
        pos += size
    return pos


class CaptureRelay:
    """Relays 127.0.0.1:port to one broker, keeping Produce request and Fetch response bodies."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.produce: list[tuple[int, bytes]] = []  # (api_version, body)
        self.fetch: list[tuple[int, bytes]] = []
        self._writers: list[asyncio.StreamWriter] = []
        self._sessions: set[asyncio.Task] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "relay did not start"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def close(self) -> None:
        async def stop() -> None:
            # Closing both ends lets every pump finish on EOF; nothing is cancelled mid-read.
            self._server.close()
            for writer in self._writers:
                writer.close()
            await asyncio.wait_for(asyncio.gather(*self._sessions, return_exceptions=True), 10)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._sessions.add(asyncio.current_task())
        self._writers.append(client_w)
        upstream_r, upstream_w = await asyncio.open_connection(*self.upstream)
        self._writers.append(upstream_w)
        in_flight: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        try:
            await asyncio.gather(self._pump(client_r, upstream_w, in_flight, True),
                                 self._pump(upstream_r, client_w, in_flight, False))  # fmt: skip
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            client_w.close()
            upstream_w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    in_flight: dict[int, tuple[int, int]], requests: bool) -> None:  # fmt: skip
        while True:
            frame = await reader.readexactly(struct.unpack(">i", await reader.readexactly(4))[0])
            if requests:
                frame = self._request(frame, in_flight)
            else:
                frame = self._response(frame, in_flight)
            writer.write(struct.pack(">i", len(frame)) + frame)
            await writer.drain()

    def _request(self, frame: bytes, in_flight: dict[int, tuple[int, int]]) -> bytes:
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
        in_flight[correlation_id] = (api_key, version)
        if api_key == PRODUCE:
            (client_id_size,) = struct.unpack_from(">h", frame, 8)
            pos = 10 + max(client_id_size, 0)
            if ProduceRequest.flexible_version_q(version):
                pos = _skip_tags(frame, pos)
            self.produce.append((version, frame[pos:]))
        return frame

    def _response(self, frame: bytes, in_flight: dict[int, tuple[int, int]]) -> bytes:
        (correlation_id,) = struct.unpack_from(">i", frame)
        api_key, version = in_flight.pop(correlation_id)
        cls = _FLEXIBLE_RESPONSE.get(api_key)
        if cls is None:
            return frame
        pos = _skip_tags(frame, 4) if cls.flexible_version_q(version) else 4
        if api_key == FETCH:
            self.fetch.append((version, frame[pos:]))
            return frame
        message = cls.decode(frame[pos:], version=version)
        for node in getattr(message, "brokers", None) or getattr(message, "coordinators", None) or [message]:
            if getattr(node, "port", None) == self.upstream[1]:
                node.host, node.port = "127.0.0.1", self.port
        return frame[:pos] + bytes(message.encode())


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
    relay = CaptureRelay((broker.host, broker.port))
    frames: dict[str, list[tuple[int, bytes]]] = {}
    delivered: dict[str, int] = {}
    try:
        for codec in codecs:
            topic = f"captured-{codec}"
            relay.produce.clear()
            producer = confluent_kafka.Producer({
                "bootstrap.servers": f"127.0.0.1:{relay.port}", "compression.type": codec, "linger.ms": 200,
                "batch.num.messages": 100_000, "acks": "all", "enable.idempotence": codec == "zstd",
            })  # fmt: skip
            results: list[bool] = []

            def on_delivery(err: object, _message: object, results: list[bool] = results) -> None:
                results.append(err is None)

            for i in range(messages):
                producer.produce(topic, key=b"k%d" % (i % 13), value=b"value-%06d" % i * 3, on_delivery=on_delivery)
            assert producer.flush(30) == 0, "producer did not drain"
            delivered[codec] = sum(results)
            frames[f"produce-{codec}"] = list(relay.produce)

        relay.fetch.clear()
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": f"127.0.0.1:{relay.port}", "group.id": "captured", "enable.auto.commit": False,
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
        frames["fetch"] = list(relay.fetch)
    finally:
        relay.close()
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
