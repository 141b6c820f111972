"""A blocking, one-request-at-a-time Kafka client that counts exactly what it sends and receives.

Metrics tests compare kqp's counters with the workload that caused them, byte for byte: frame sizes
(size prefix included, as kqp counts them), record counts, request counts per API, and the
`throttle_time_ms` of every response. Real clients hide those numbers behind batching, retries and
background requests, so this client builds each frame itself with kafka-python's message classes
(kqp.protocol.messages) and keeps a tally. It honours throttling the KIP-219 way without trying:
kqp mutes the connection, so the next request simply waits to be read.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import decode_response, encode_request

from .net import split_host_port

PRODUCE_VERSION, FETCH_VERSION, METADATA_VERSION = 7, 7, 7   # every upstream here serves these
_SIZE = struct.Struct(">i")


@dataclass
class Tally:
    """What one client sent and received, as kqp should have counted it."""

    requests: Counter[str] = field(default_factory=Counter)          # api name -> count
    produce_bytes: int = 0          # Produce request frames, size prefix included
    produce_records: int = 0
    fetch_bytes: int = 0            # Fetch response frames, size prefix included
    fetch_records: int = 0
    throttle_ms: list[int] = field(default_factory=list)   # every response's throttle_time_ms

    @property
    def throttle_seconds(self) -> float:
        return sum(self.throttle_ms) / 1000

    @property
    def throttled_responses(self) -> int:
        return sum(1 for ms in self.throttle_ms if ms > 0)


class RawConnection:
    def __init__(self, address: str, client_id: str, tally: Tally, timeout: float = 30.0,
                 tls: ssl.SSLContext | None = None) -> None:
        host, port = split_host_port(address)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.client_id = client_id
        self.tally = tally
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_exactly(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(left)
            if not chunk:
                raise ConnectionError("kqp closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def call(self, api_key: int, version: int, name: str, **fields: object) -> tuple[bytes, object]:
        """Send one request, return (response frame, decoded response)."""
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, self.client_id, **fields)
        self.sock.sendall(frame)
        self.tally.requests[name] += 1
        if api_key == ApiKey.Produce:
            self.tally.produce_bytes += len(frame)
        head = self._read_exactly(4)
        response = head + self._read_exactly(_SIZE.unpack(head)[0])
        decoded = decode_response(api_key, version, memoryview(response))
        self.tally.throttle_ms.append(int(getattr(decoded, "throttle_time_ms", 0) or 0))
        return response, decoded

    def leader_address(self, topic: str, partition: int = 0, timeout: float = 20.0) -> str:
        """The address (kqp's listener) of `partition`'s leader, asking Metadata until it has one."""
        deadline = time.monotonic() + timeout
        while True:
            _, md = self.call(ApiKey.Metadata, METADATA_VERSION, "Metadata",
                              topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=True)
            brokers = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}  # type: ignore[attr-defined]
            for t in md.topics:  # type: ignore[attr-defined]
                for p in t.partitions:
                    if t.name == topic and p.partition_index == partition and p.leader_id in brokers:
                        return brokers[p.leader_id]
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no leader for {topic}-{partition} within {timeout}s: {md}")
            time.sleep(0.2)

    def produce(self, topic: str, values: list[bytes], partition: int = 0) -> int:
        """One Produce request (acks=-1) carrying `values` as one batch; returns the base offset."""
        builder = MemoryRecordsBuilder(2, 0, 16 << 20)
        now_ms = int(time.time() * 1000)
        for v in values:
            builder.append(now_ms, None, v)
        builder.close()
        topic_data = ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=bytes(builder.buffer()))])
        _, resp = self.call(ApiKey.Produce, PRODUCE_VERSION, "Produce", transactional_id=None, acks=-1,
                            timeout_ms=30_000, topic_data=[topic_data])
        part = resp.responses[0].partition_responses[0]  # type: ignore[attr-defined]
        assert part.error_code == 0, f"produce error {part.error_code}"
        self.tally.produce_records += len(values)
        return int(part.base_offset)

    def fetch(self, topic: str, offset: int, partition: int = 0, max_wait_ms: int = 100) -> tuple[int, int]:
        """One Fetch from `offset`; returns (records received, next offset)."""
        request_topic = FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])
        frame, resp = self.call(ApiKey.Fetch, FETCH_VERSION, "Fetch", replica_id=-1, max_wait_ms=max_wait_ms,
                                min_bytes=1, max_bytes=8 << 20, isolation_level=0, session_id=0,
                                session_epoch=-1, topics=[request_topic], forgotten_topics_data=[])
        self.tally.fetch_bytes += len(frame)
        records, next_offset = 0, offset
        for topic_response in resp.responses:  # type: ignore[attr-defined]
            for part in topic_response.partitions:
                assert part.error_code == 0, f"fetch error {part.error_code}"
                batches = MemoryRecords(part.records or b"")
                while (batch := batches.next_batch()) is not None:
                    for record in batch:
                        if record.offset >= offset:
                            next_offset = record.offset + 1
                        records += 1
        self.tally.fetch_records += records
        return records, next_offset
