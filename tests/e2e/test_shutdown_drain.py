"""SIGTERM lets owed responses drain: a response held for an old client's throttle still arrives.

Two pipelined Produce v4 requests of ~30 KB against a 20 KB/s quota (0.2 s x 11 windows): the
second crosses the quota, X = (60 KB / 2 s - 20 KB/s) / 20 KB/s * 2 s = 1 s, and because v4 predates
KIP-219 its response is held for that second. kqp gets SIGTERM while holding it: it must stop
accepting, deliver the held response, close the connection, and exit 0 within the grace time.
"""

from __future__ import annotations

import signal
import socket
import time
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.net import read_until_eof, split_host_port
from helpers.quota_frames import produce_frame, read_responses
from helpers.topics import ensure_topic

pytestmark = pytest.mark.e2e


def test_sigterm_delivers_a_held_response_then_exits_zero(mock_cluster: Any, kqp: Any) -> None:
    quotas = {"window_size_seconds": 0.2, "window_count": 11,
              "entities": [{"client_id": "draining", "producer_byte_rate": 20_000}]}
    proxy = kqp(mock_cluster, quotas, shutdown_grace_ms=5000)
    topic = unique_topic("drain")
    ensure_topic(mock_cluster, topic, 1, upstream_kind=mock_cluster.kind)
    frames = [produce_frame(topic, 4, corr, "draining") for corr in (1, 2)]
    with socket.create_connection(split_host_port(proxy.bootstrap), timeout=10) as sock:
        sent = time.monotonic()
        sock.sendall(b"".join(frames))
        first = read_responses(sock, 1, timeout=10)
        assert first[0][0] - sent < 0.8, "the first response is not throttled and must not wait"
        proxy.send_signal(signal.SIGTERM)          # while the second response is held
        second = read_responses(sock, 1, timeout=10)
        held_for = second[0][0] - sent
        assert 0.7 <= held_for <= 4.0, f"the held response came after {held_for:.2f}s, not ~1s"
        assert int.from_bytes(second[0][1][:4], "big") == 2       # correlation id of the second
        _, closed = read_until_eof(sock, 5)
        assert closed, "kqp kept the connection open after draining it"
    assert proxy.proc.wait(10) == 0
    assert "kqp stopped" in proxy.logs()
