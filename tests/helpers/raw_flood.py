"""A producer of raw frames that never asks ApiVersions and never waits out a throttle (issue 20).

Two clients no library here plays: a pre-KIP-219 producer that never sends ApiVersions (Produce v3
frames, as an old client with a pinned version does), and a Sarama-like one (Sarama 1.22 sends
Produce v7 and ignores `throttle_time_ms`). Either keeps `in_flight` requests pipelined, sending the
next the moment a response frees a slot, whatever the response's throttle said. Frames are built with
kafka-python's message classes (`quota_frames.produce_frame`); a reader thread takes the responses,
so the sender never waits for anything but a free slot. A request counts as timed out when its
response came later than `timeout` after it was sent, or never (the client does not close and
retry: it only counts). Every wait is bounded; `run` returns after `seconds` plus the drain.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from kafka.protocol.producer import ProduceResponse

from .net import split_host_port
from .quota_frames import produce_frame

_SIZE = struct.Struct(">i")
DRAIN_SECONDS = 15.0


@dataclass
class RawFloodReport:
    version: int
    started: float = 0.0
    offered_until: float = 0.0
    sent: int = 0
    answered: int = 0
    timeouts: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    throttle_max_ms: int = 0


class RawFlood:
    def __init__(self, address: str, topic: str, client_id: str, version: int, *, in_flight: int = 5,
                 records: int = 16, timeout: float = 5.0) -> None:
        self.address, self.topic, self.client_id, self.version = address, topic, client_id, version
        self.in_flight, self.records, self.timeout = in_flight, records, timeout
        self.report = RawFloodReport(version)
        self._sent_at: dict[int, float] = {}
        self._slots = threading.Condition()
        self._sock: socket.socket | None = None

    def run(self, seconds: float) -> RawFloodReport:
        host, port = split_host_port(self.address)
        self._sock = sock = socket.create_connection((host, port), timeout=30)
        reader = threading.Thread(target=self._read, name=f"raw-flood-{self.client_id}", daemon=True)
        reader.start()
        report = self.report
        try:
            report.started = time.monotonic()
            deadline = report.started + seconds
            correlation = 0
            while time.monotonic() < deadline:
                with self._slots:
                    if not self._slots.wait_for(lambda: len(self._sent_at) < self.in_flight,
                                                timeout=max(0.0, deadline - time.monotonic())):
                        continue
                correlation += 1
                frame = produce_frame(self.topic, self.version, correlation, self.client_id, records=self.records,
                                      acks=1)
                with self._slots:
                    self._sent_at[correlation] = time.monotonic()
                sock.sendall(frame)
                report.sent += 1
            report.offered_until = time.monotonic()
            with self._slots:
                self._slots.wait_for(lambda: not self._sent_at, timeout=DRAIN_SECONDS)
                report.timeouts += len(self._sent_at)   # never answered
        except OSError as exc:
            report.errors.append(repr(exc))
        finally:
            sock.close()
            reader.join(5)
        return report

    def _read(self) -> None:
        assert self._sock is not None
        buffer = b""
        try:
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    return
                buffer += chunk
                while len(buffer) >= 4 and len(buffer) >= 4 + _SIZE.unpack_from(buffer)[0]:
                    size = _SIZE.unpack_from(buffer)[0]
                    frame, buffer = buffer[4:4 + size], buffer[4 + size:]
                    self._answered(frame, time.monotonic())
        except OSError:
            return

    def _answered(self, frame: bytes, at: float) -> None:
        (correlation,) = _SIZE.unpack_from(frame)
        with self._slots:
            sent = self._sent_at.pop(correlation, None)
            self._slots.notify_all()
        if sent is None:
            self.report.errors.append(f"a response to {correlation}, which was not awaited")
            return
        latency = at - sent
        report = self.report
        report.answered += 1
        report.latencies.append(latency)
        if latency > self.timeout:
            report.timeouts += 1
        body = ProduceResponse.decode(frame[4 + (1 if self.version >= 9 else 0):], version=self.version)
        report.throttle_max_ms = max(report.throttle_max_ms, int(body.throttle_time_ms or 0))
        for topic in body.responses:
            for part in topic.partition_responses:
                if part.error_code:
                    report.errors.append(f"produce error {part.error_code}")
