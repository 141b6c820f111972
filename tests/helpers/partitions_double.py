"""The smallest upstream that answers CreatePartitions: a test double, not a Kafka broker.

Neither test upstream implements CreatePartitions (librdkafka's mock cluster has no admin APIs,
Tansu has no CreatePartitions), so KIP-599's third API is tested through kqp against this double.
It speaks exactly three APIs, with kafka-python's message classes (Apache Kafka's schemas):
ApiVersions (what kqp asks at start), Metadata (kqp's start-up and its topic-count lookups, and
clients), and CreatePartitions (v0-v3). Anything else closes the connection. It keeps a
topic -> partition count table that CreatePartitions grows, and a log of every request it read,
per connection, so tests can assert what reached the upstream and in what order.

Runs in a thread (socketserver), so a test can point a kqp subprocess at it; stop it with the
context manager. Everything is on 127.0.0.1 with a kernel-chosen port.
"""

from __future__ import annotations

import socket
import struct
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin.topics import CreatePartitionsRequest, CreatePartitionsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

from kqp.protocol.apis import ApiKey

from .upstream_double import UpstreamDouble, read_exact

NODE_ID = 1
UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, UNSUPPORTED_VERSION = 3, 37, 35
RANGES = {ApiKey.ApiVersions: (0, 3), ApiKey.Metadata: (0, 12), ApiKey.CreatePartitions: (0, 3)}
CLASSES = {ApiKey.ApiVersions: (ApiVersionsRequest, ApiVersionsResponse),
           ApiKey.Metadata: (MetadataRequest, MetadataResponse),
           ApiKey.CreatePartitions: (CreatePartitionsRequest, CreatePartitionsResponse)}  # fmt: skip


@dataclass(frozen=True)
class Seen:
    """One request the double read: which connection, what, and the topics it named."""

    connection: int
    api_key: int
    api_version: int
    client_id: str | None
    topics: tuple[str, ...] | None      # None: all topics (Metadata)


def _flexible(cls: type, version: int) -> bool:
    first = cls._flexible_versions[0]
    return 0 <= first <= version


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7



class PartitionsDouble(UpstreamDouble):
    name = "partitions-double"

    def __init__(self, topics: dict[str, int] | None = None) -> None:
        self.topics: dict[str, int] = dict(topics or {})
        self.topic_ids: dict[str, uuid.UUID] = {name: uuid.uuid4() for name in self.topics}
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        super().__init__()

    def requests(self, api_key: int) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.api_key == api_key]

    # -- one connection ------------------------------------------------------------------------
    def serve(self, sock: socket.socket, connection: int) -> None:
        sock.settimeout(30)
        while True:
            try:
                head = read_exact(sock, 4)
                if head is None:
                    return
                frame = read_exact(sock, struct.unpack(">i", head)[0])
            except OSError:
                return
            if frame is None:
                return
            answer = self._answer(frame, connection)
            if answer is None:
                return
            sock.sendall(struct.pack(">i", len(answer)) + answer)

    def _answer(self, frame: bytes, connection: int) -> bytes | None:
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        (length,) = struct.unpack_from(">h", frame, 8)
        client_id = None if length < 0 else frame[10:10 + length].decode()
        pos = 10 + max(length, 0)
        if api_key not in CLASSES:
            return None
        request_cls, response_cls = CLASSES[api_key]
        low, high = RANGES[api_key]
        if api_key == ApiKey.ApiVersions and version > high:
            # As Kafka does: error 35 and our range, in a v0 body the client can always read.
            self._log(Seen(connection, api_key, version, client_id, ()))
            return struct.pack(">i", correlation_id) + self._api_versions(0, UNSUPPORTED_VERSION)
        if not low <= version <= high:
            return None
        if _flexible(request_cls, version):
            count, pos = _uvarint(frame, pos)
            for _ in range(count):
                _, pos = _uvarint(frame, pos)
                size, pos = _uvarint(frame, pos)
                pos += size
        request = request_cls.decode(frame[pos:], version=version)
        if api_key == ApiKey.ApiVersions:
            self._log(Seen(connection, api_key, version, client_id, ()))
            body = self._api_versions(version, 0)
        elif api_key == ApiKey.Metadata:
            names = None if request.topics is None or (version == 0 and not request.topics) else \
                tuple(t.name for t in request.topics)
            self._log(Seen(connection, api_key, version, client_id, names))
            body = self._metadata(version, names)
        else:
            self._log(Seen(connection, api_key, version, client_id, tuple(t.name for t in request.topics)))
            body = self._create_partitions(version, request)
        header = struct.pack(">i", correlation_id)
        if api_key != ApiKey.ApiVersions and _flexible(response_cls, version):
            header += b"\x00"
        return header + body

    def _log(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    # -- the three answers -----------------------------------------------------------------------
    def _api_versions(self, version: int, error: int) -> bytes:
        entry = ApiVersionsResponse.ApiVersion
        response = ApiVersionsResponse(
            error_code=error, throttle_time_ms=0,
            api_keys=[entry(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(RANGES.items())],
        )  # fmt: skip
        return bytes(response.encode(version=version))

    def _metadata(self, version: int, names: tuple[str, ...] | None) -> bytes:
        Topic = MetadataResponse.MetadataResponseTopic
        Partition = Topic.MetadataResponsePartition
        Broker = MetadataResponse.MetadataResponseBroker
        with self._lock:
            wanted = sorted(self.topics) if names is None else list(names)
            topics: list[Any] = []
            for name in wanted:
                count = self.topics.get(name)
                if count is None:
                    topics.append(Topic(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=uuid.UUID(int=0),
                                        is_internal=False, partitions=[]))
                    continue
                topics.append(Topic(error_code=0, name=name, topic_id=self.topic_ids[name], is_internal=False,
                                    partitions=[Partition(error_code=0, partition_index=p, leader_id=NODE_ID,
                                                          leader_epoch=0, replica_nodes=[NODE_ID],
                                                          isr_nodes=[NODE_ID], offline_replicas=[])
                                                for p in range(count)]))
        response = MetadataResponse(
            throttle_time_ms=0, cluster_id="partitions-double", controller_id=NODE_ID, topics=topics,
            brokers=[Broker(node_id=NODE_ID, host="127.0.0.1", port=self.port, rack=None)],
        )  # fmt: skip
        return bytes(response.encode(version=version))

    def _create_partitions(self, version: int, request: Any) -> bytes:
        Result = CreatePartitionsResponse.CreatePartitionsTopicResult
        results = []
        with self._lock:
            for topic in request.topics:
                current = self.topics.get(topic.name)
                if current is None:
                    results.append(Result(name=topic.name, error_code=UNKNOWN_TOPIC_OR_PARTITION,
                                          error_message="unknown topic"))
                elif topic.count <= current:
                    results.append(Result(name=topic.name, error_code=INVALID_PARTITIONS,
                                          error_message=f"topic has {current} partitions"))
                else:
                    if not request.validate_only:
                        self.topics[topic.name] = topic.count
                    results.append(Result(name=topic.name, error_code=0, error_message=None))
        return bytes(CreatePartitionsResponse(throttle_time_ms=0, results=results).encode(version=version))
