"""SIGTERM lets owed responses drain: a response the upstream is still working on still arrives.

A Fetch on an empty partition with max_wait_ms 1500 is a response owed for 1.5 s (the upstream
long-polls). kqp gets SIGTERM while it is owed: it must stop accepting, keep the connection until
the Fetch response has gone out, then close it and exit 0 within the grace time. A request the
client sends after SIGTERM is not read (kqp no longer reads requests while draining).
"""

from __future__ import annotations

import signal
import socket
import struct
import time
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.net import read_until_eof, split_host_port
from helpers.quota_frames import read_responses
from helpers.topics import ensure_topic
from kafka.protocol.consumer import FetchRequest

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request

pytestmark = pytest.mark.e2e

MAX_WAIT_MS = 1500


def long_poll(topic: str, correlation_id: int) -> bytes:
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return encode_request(ApiKey.Fetch, 11, correlation_id, "draining", replica_id=-1, max_wait_ms=MAX_WAIT_MS,
                          min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                          topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])])


def test_sigterm_delivers_an_owed_response_then_exits_zero(mock_cluster: Any, kqp: Any) -> None:
    proxy = kqp(mock_cluster, shutdown_grace_ms=5000)
    topic = unique_topic("drain")
    ensure_topic(mock_cluster, topic, 1, upstream_kind=mock_cluster.kind)
    with socket.create_connection(split_host_port(proxy.bootstrap), timeout=10) as sock:
        sent = time.monotonic()
        sock.sendall(long_poll(topic, 1))
        time.sleep(0.3)                            # the Fetch is at the upstream, long-polling
        proxy.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        sock.sendall(long_poll(topic, 2))          # after SIGTERM: never read
        [(at, frame)] = read_responses(sock, 1, timeout=10)
        assert struct.unpack_from(">i", frame)[0] == 1, "the owed Fetch response"
        assert at - sent >= MAX_WAIT_MS / 1000 - 0.3, \
            f"the response came after {at - sent:.2f}s: the upstream did not long-poll, nothing was owed"
        data, closed = read_until_eof(sock, 5)
        assert closed, "kqp kept the connection open after draining it"
        assert data == b"", "a request sent after SIGTERM was answered"
    assert proxy.proc.wait(10) == 0
    assert "kqp stopped" in proxy.logs()
