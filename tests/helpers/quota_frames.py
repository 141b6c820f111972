"""Raw Kafka frames for quota tests that must choose a request version no client library would pick.

A test of "old versions get their response held" needs Produce v4 on the wire, and a test of idle
muted connections needs exact control over when the next request is sent; both talk to kqp over a
plain socket. Requests are built with kafka-python's own message classes (never a hand-written
schema), records with its record-batch builder.
"""

from __future__ import annotations

import socket
import struct
import time

from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from .quota_clients import message_value

_SIZE = struct.Struct(">i")


def record_batch(tag: str, count: int) -> bytes:
    """One v2 record batch of `count` 1000-byte values tagged `tag`."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(count):
        builder.append(timestamp=None, key=None, value=message_value(tag, i), headers=[])
    builder.close()
    return bytes(builder.buffer())


def produce_frame(topic: str, version: int, correlation_id: int, client_id: str, *, records: int = 30,
                  acks: int = -1) -> bytes:
    """A whole Produce request frame (size prefix included) for partition 0 of `topic`."""
    batch = record_batch(f"{client_id}{correlation_id}", records)
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)
    data = ProduceRequest.TopicProduceData(name=topic, partition_data=[partition])
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[data])
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


def read_responses(sock: socket.socket, count: int, timeout: float) -> list[tuple[float, bytes]]:
    """`count` response frames (without size prefix), each with its arrival time; bounded by `timeout`."""
    deadline = time.monotonic() + timeout
    buffer = b""
    out: list[tuple[float, bytes]] = []
    while len(out) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"only {len(out)} of {count} responses within {timeout}s")
        sock.settimeout(remaining)
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"the peer closed the connection after {len(out)} responses")
        buffer += chunk
        while len(buffer) >= 4 and len(buffer) >= 4 + _SIZE.unpack_from(buffer)[0]:
            size = _SIZE.unpack_from(buffer)[0]
            out.append((time.monotonic(), buffer[4:4 + size]))
            buffer = buffer[4 + size:]
    return out
