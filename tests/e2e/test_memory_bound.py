"""kqp's memory stays within its documented bound (`kqp.proxy.runtime.memory_bound`, README
"Bounded memory") when clients stop reading and when the upstream stops reading: measured, as the
kqp process's peak resident set (VmHWM in /proc/PID/status), never timed.

The config makes the bound tight enough to mean something: `max_frame_bytes` 1 MiB, so a
connection may hold at most 7 MiB, while the load offered would make a kqp without backpressure
hold each connection's whole pipeline (tens of MiB). The bound checked is

    VmHWM <= RSS before the load + connections x connection_bound(max_frame_bytes).total
             + glibc's retained free heap (TRIM_THRESHOLD_BYTES, `proxy/tools/allocator.py`)

Between the load and the reading, the test waits until the upstream tap has stopped moving frames
(kqp has stopped reading): that wait is bounded and asserts nothing about time.

Last, a client trickling a frame a byte at a time (slowloris) is closed as idle: a whole request,
not a byte, is activity.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from helpers.fault_tap import FaultTap
from helpers.net import split_host_port
from helpers.quota_frames import produce_frame
from kafka.protocol.consumer import FetchRequest

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request
from kqp.proxy.runtime.memory_bound import connection_bound
from kqp.proxy.tools.allocator import TRIM_THRESHOLD_BYTES

pytestmark = pytest.mark.e2e

MAX_FRAME = 1 << 20
CONNECTIONS = 16
PIPELINE = 40                       # requests each connection sends without reading a response
FETCH_BYTES = 600 * 1024            # each Fetch response: most of a frame
PRODUCE_RECORDS = 850               # 1000-byte values: a Produce request of ~870 KB
MiB = 1 << 20


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _settle(count: Callable[[], int], quiet: float = 1.5, limit: float = 60.0) -> int:
    """Wait until `count()` stops changing for `quiet` s (at most `limit` s); its last value."""
    last, since, deadline = count(), time.monotonic(), time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


def _connect(bootstrap: str) -> socket.socket:
    sock = socket.create_connection(split_host_port(bootstrap), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)   # keep the kernel's share small
    return sock


def _send_what_fits(sock: socket.socket, frames: list[bytes], limit: float = 5.0) -> int:
    """Send frames until kqp stops reading (the socket stays full for a second); bytes sent."""
    sock.setblocking(False)
    data, sent, stuck_since = b"".join(frames), 0, None
    deadline = time.monotonic() + limit
    while sent < len(data) and time.monotonic() < deadline:
        try:
            sent += sock.send(data[sent:sent + MiB])
            stuck_since = None
        except BlockingIOError:
            stuck_since = stuck_since or time.monotonic()
            if time.monotonic() - stuck_since > 1.0:
                break
            time.sleep(0.02)
    return sent


def _fetch(topic: str, correlation_id: int, client_id: str) -> bytes:
    """A Fetch v5 of partition 0 from an offset that moves with the correlation id: 8 values on."""
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=correlation_id * 8, log_start_offset=-1,
                                                  partition_max_bytes=FETCH_BYTES)
    return encode_request(ApiKey.Fetch, 5, correlation_id, client_id, replica_id=-1, max_wait_ms=100, min_bytes=1,
                          max_bytes=FETCH_BYTES, isolation_level=0,
                          topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])])


def _bound(baseline_kib: int) -> int:
    return baseline_kib * 1024 + CONNECTIONS * connection_bound(MAX_FRAME).total + TRIM_THRESHOLD_BYTES


def _fill_topic(bootstrap: str, topic: str, megabytes: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "batch.size": 100_000, "linger.ms": 5,
                         "message.max.bytes": 900_000})
    value = b"x" * 100_000
    for _ in range(megabytes * 10):
        producer.produce(topic, value=value, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0


def test_readers_that_never_read_their_fetch_responses_stay_within_the_bound(fault_tap: FaultTap, kqp) -> None:
    proxy = kqp(fault_tap.relay(next(iter(fault_tap.hops))), max_frame_bytes=MAX_FRAME)
    topic = "memory-fetch"
    _fill_topic(proxy.bootstrap, topic, PIPELINE * FETCH_BYTES // MiB + 2)
    socks = [_connect(proxy.bootstrap) for _ in range(CONNECTIONS)]
    try:
        baseline = _status_kib(proxy.pid, "VmRSS")
        for n, sock in enumerate(socks):
            for correlation_id in range(PIPELINE):
                sock.sendall(_fetch(topic, correlation_id, f"reader-{n}"))
        answered = _settle(lambda: len(fault_tap.responses(api_key=ApiKey.Fetch)))

        peak = _status_kib(proxy.pid, "VmHWM") * 1024
    finally:
        for sock in socks:
            sock.close()
    offered = CONNECTIONS * PIPELINE * FETCH_BYTES
    print(f"fetch readers: baseline {baseline // 1024} MiB, peak {peak // MiB} MiB, bound {_bound(baseline) // MiB} "
          f"MiB, {answered} of {CONNECTIONS * PIPELINE} responses left the upstream ({offered // MiB} MiB offered)")
    assert answered > CONNECTIONS, "the upstream hardly answered: the load never reached kqp"
    assert peak <= _bound(baseline), f"kqp's peak RSS {peak // MiB} MiB is over its bound {_bound(baseline) // MiB} MiB"


def test_a_stalled_upstream_keeps_kqp_within_the_bound(fault_tap: FaultTap, kqp) -> None:
    proxy = kqp(fault_tap.relay(next(iter(fault_tap.hops))), max_frame_bytes=MAX_FRAME)
    socks = [_connect(proxy.bootstrap) for _ in range(CONNECTIONS)]
    try:
        baseline = _status_kib(proxy.pid, "VmRSS")
        fault_tap.stall()
        frames = [produce_frame("memory-stall", 7, c, "stalled", records=PRODUCE_RECORDS) for c in range(PIPELINE)]
        assert len(frames[0]) < MAX_FRAME
        sent = sum(_send_what_fits(sock, frames) for sock in socks)
        _settle(lambda: _status_kib(proxy.pid, "VmRSS"))
        peak = _status_kib(proxy.pid, "VmHWM") * 1024
        fault_tap.unstall()
    finally:
        for sock in socks:
            sock.close()
    offered = CONNECTIONS * sum(map(len, frames))
    print(f"stalled upstream: baseline {baseline // 1024} MiB, peak {peak // MiB} MiB, bound {_bound(baseline) // MiB} "
          f"MiB, {sent // MiB} of {offered // MiB} MiB offered left the clients (kernel buffers included)")
    assert peak <= _bound(baseline), f"kqp's peak RSS {peak // MiB} MiB is over its bound {_bound(baseline) // MiB} MiB"
    assert sent < offered, "kqp read everything: the upstream never stalled it"


def test_a_client_trickling_a_frame_is_closed_as_idle(tansu, kqp) -> None:
    # Slowloris: a byte every 50 ms of a Produce frame that would take minutes to finish. Bytes
    # keep coming, but no whole request does, so kqp closes it after connections_max_idle_ms.
    proxy = kqp(tansu, connections_max_idle_ms=1000)
    mark = len(proxy.log_lines())
    frame = produce_frame("memory-trickle", 7, 1, "trickler", records=100)
    with _connect(proxy.bootstrap) as sock:
        sock.settimeout(0.05)
        closed = False
        for byte in frame[:200]:   # 10 s at most: ten times the idle limit
            try:
                sock.send(bytes([byte]))
                closed = sock.recv(1) == b""
            except TimeoutError:
                pass
            except OSError:
                closed = True
            if closed:
                break
    assert closed, "a trickling client was never closed"
    # The close reaches the client before kqp's log line reaches the test's reader: wait for it.
    proxy.wait_for_log("idle for more than 1000 ms", 5.0, after=mark)
