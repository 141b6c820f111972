"""The saturated test upstream itself: one FIFO, frames whole and in order, drained at C, bounded.

The first two tests put a recording double behind the relay (a TCP server that answers each frame
with its correlation id) so that they can see every frame the "broker" receives and when. The
others run real clients through the relay to a real Tansu broker that advertises the relay: a
producer works through it, the rate it drains is C (judged over seconds, within a tolerance that
holds on a busy machine: the pacer can fall behind C when starved of CPU, never run ahead of it),
and a small client's latency grows with the load offered beside it.
"""

from __future__ import annotations

import socket
import socketserver
import statistics
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from .names import unique_topic
from .net import LOOPBACK
from .quota_clients import confluent_flood
from .saturated_upstream import SaturatedUpstream, saturated_tansu
from .topics import create_topic


class _Recorder(socketserver.BaseRequestHandler):
    """The double: records each whole frame with its arrival time, answers with its correlation id."""

    def handle(self) -> None:
        server: Any = self.server
        buffer = b""
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            buffer += data
            while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">i", buffer[:4])[0]:
                size = 4 + struct.unpack(">i", buffer[:4])[0]
                frame, buffer = buffer[:size], buffer[size:]
                with server.lock:
                    server.frames.append((time.monotonic(), frame))
                self.request.sendall(struct.pack(">i", 4) + frame[8:12])


@pytest.fixture
def recorder() -> Iterator[Any]:
    server = socketserver.ThreadingTCPServer((LOOPBACK, 0), _Recorder)
    server.daemon_threads = True
    server.frames = []   # type: ignore[attr-defined]
    server.lock = threading.Lock()   # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def frame(connection: int, sequence: int, size: int) -> bytes:
    """A Kafka-framed request: api key 0, version 9, correlation id `connection * 1000 + sequence`."""
    head = struct.pack(">hhi", 0, 9, connection * 1000 + sequence)
    body = head + bytes([connection]) * (size - 4 - len(head))
    return struct.pack(">i", len(body)) + body


def read_exactly(sock: socket.socket, count: int, timeout: float) -> bytes:
    """Up to `count` bytes, reading until they are all in or `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    data = b""
    while len(data) < count and (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(count - len(data))
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return data


def test_frames_reach_the_broker_whole_in_one_fifo_at_capacity(recorder: Any) -> None:
    with SaturatedUpstream(100_000, burst_seconds=0.0) as relay:
        relay.relay_to(f"{LOOPBACK}:{recorder.server_address[1]}")
        a = socket.create_connection((LOOPBACK, relay.port))
        b = socket.create_connection((LOOPBACK, relay.port))
        sent: dict[int, list[bytes]] = {1: [], 2: []}
        # A1 B1 A2 B2 A3 B3, each 10 kB, sent 20 ms apart so that they reach the relay in that order
        for sequence in range(3):
            for number, sock in ((1, a), (2, b)):
                data = frame(number, sequence, 10_000)
                sent[number].append(data)
                sock.sendall(data)
                time.sleep(0.02)
        deadline = time.monotonic() + 10
        while len(recorder.frames) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        a.close()
        b.close()
        received = [f for _, f in recorder.frames]
        # Whole, nothing lost, and each connection's in the order it sent them
        assert sorted(received) == sorted(sent[1] + sent[2])
        for number in (1, 2):
            assert [f for f in received if f[-1] == number] == sent[number]
        # One FIFO: frames left in the order the relay read them (A1 B1 A2 B2 ... unless a busy
        # machine let two sends pile up before one read), and the broker got them in that order.
        waits = relay.waits()
        assert [w.queued_at for w in waits] == sorted(w.queued_at for w in waits)
        relay_connection: dict[int, int] = {}
        for wait, data in zip(waits, received, strict=True):
            assert relay_connection.setdefault(wait.connection, data[-1]) == data[-1]
        assert len(relay_connection) == 2
        # 60 kB at 100 kB/s: the last frame left about 0.5 s after the first (each frame is paid
        # for after it is sent: 5 frames of debt x 0.1 s)
        span = waits[-1].sent_at - waits[0].sent_at
        assert 0.45 <= span <= 1.5, f"six 10 kB frames at 100 kB/s took {span:.2f} s"


def test_a_full_queue_stops_reading_until_it_drains(recorder: Any) -> None:
    with SaturatedUpstream(500_000, max_queue_bytes=100_000, burst_seconds=0.0) as relay:
        relay.relay_to(f"{LOOPBACK}:{recorder.server_address[1]}")
        flood = socket.create_connection((LOOPBACK, relay.port))
        probe = socket.create_connection((LOOPBACK, relay.port))
        blast = b"".join(frame(1, i, 20_000) for i in range(75))   # 1.5 MB: 3 s at 500 kB/s
        sender = threading.Thread(target=flood.sendall, args=(blast,), daemon=True)
        sender.start()
        time.sleep(0.5)
        probe.sendall(frame(2, 0, 100))
        sent_at = time.monotonic()
        probe.settimeout(10)
        assert len(probe.recv(8)) == 8   # its answer
        waited = time.monotonic() - sent_at
        sender.join(15)
        answers = read_exactly(flood, 75 * 8, 15)
        probe.close()
        flood.close()
        assert len(answers) == 75 * 8, "every frame of the flood was answered"
        # The bound held, up to what one read of the socket brought beyond it (asyncio reads at most
        # 256 KiB at a time)
        assert relay.peak <= 100_000 + 256 * 1024 + 20_000
        # The probe waited behind a full queue: about 100 kB / 500 kB/s = 0.2 s, and at most the
        # backlog the relay held plus the flood's bytes waiting in sockets
        assert 0.1 <= waited <= 3.0, f"probe waited {waited:.2f} s"


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaturatedUpstream]:
    log = Path(tmp_path_factory.mktemp("saturated")) / "tansu.log"
    with saturated_tansu(log, 400_000) as upstream:
        yield upstream


class Probe:
    """A small message every 50 ms (linger 0) from one producer kept connected between measurements:
    the seconds from produce() to its delivery report, as a bystander sees them."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.errors: list[str] = []
        self.samples: list[tuple[float, float]] = []   # (sent at, delivery latency) of every message
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": "probe", "linger.ms": 0,
                                  "message.timeout.ms": 60000})
        self.measure(0.5)   # connected, with metadata, before anything is measured

    def measure(self, seconds: float) -> list[float]:
        latencies: list[float] = []

        def delivered(err: Any, _msg: Any, sent: float) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                latencies.append(time.monotonic() - sent)
                self.samples.append((sent, latencies[-1]))

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sent = time.monotonic()
            self.producer.produce(self.topic, b"p" * 100, partition=0,
                                  on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent))
            next_at = sent + 0.05
            while (left := next_at - time.monotonic()) > 0:
                self.producer.poll(min(left, 0.005))
        assert self.producer.flush(60) == 0
        assert not self.errors, self.errors[:3]
        return latencies


def flood_in_background(bootstrap: str, topic: str, seconds: float) -> threading.Thread:
    """A producer flat out, with room for 4 MB in flight: more than the FIFO and the sockets hold."""
    thread = threading.Thread(target=confluent_flood, args=(bootstrap, topic, "flood", seconds),
                              kwargs={"queue.buffering.max.kbytes": 4096}, daemon=True)
    thread.start()
    return thread


def test_a_real_producer_through_the_relay_is_served_at_capacity(relay: SaturatedUpstream) -> None:
    topic = unique_topic("saturated")
    create_topic(relay.bootstrap, topic, 1)
    relay.set_capacity(400_000)
    probe = Probe(relay.bootstrap, topic)
    idle = probe.measure(2.0)
    flood = flood_in_background(relay.bootstrap, topic, 9.0)
    time.sleep(2.0)                      # the flood fills the FIFO
    start = time.monotonic()
    loaded = probe.measure(6.0)
    rate = relay.drained(start, start + 6.0) / 6.0
    flood.join(60)
    # Judged over 6 s: never above C (the pacer), at most 20% below it (a busy machine's loop lags).
    assert 0.8 * 400_000 <= rate <= 1.02 * 400_000, f"drained {rate:.0f} B/s"
    # Latency grows with the load: the FIFO holds 1 MB (and a read more), ~2.5-2.8 s at C, for
    # every client in it; the probe waits that long, not longer (a flood must not starve it).
    assert statistics.median(idle) < 0.1, f"idle probe median {statistics.median(idle):.3f} s"
    assert 1.5 <= statistics.median(loaded) <= 5.0, f"loaded probe median {statistics.median(loaded):.3f} s"


def test_capacity_can_change_while_it_runs(relay: SaturatedUpstream) -> None:
    topic = unique_topic("saturated")
    create_topic(relay.bootstrap, topic, 1)
    relay.set_capacity(200_000)
    flood = flood_in_background(relay.bootstrap, topic, 12.0)
    time.sleep(1.5)
    start = time.monotonic()
    time.sleep(4.0)
    low = relay.drained(start, start + 4.0) / 4.0
    relay.set_capacity(600_000)
    start = time.monotonic()
    time.sleep(4.0)
    high = relay.drained(start, start + 4.0) / 4.0
    flood.join(60)
    relay.set_capacity(400_000)
    assert 0.8 * 200_000 <= low <= 1.02 * 200_000, f"at 200 kB/s drained {low:.0f} B/s"
    assert 0.8 * 600_000 <= high <= 1.02 * 600_000, f"at 600 kB/s drained {high:.0f} B/s"
