"""The recording relay itself: framing, labels, timestamps, fault injection, and the Tansu wiring.

Quota tests will rest their strongest claims on what this relay saw, so it is tested on its own
first: against a scripted fake broker (exact bytes, any chunking), then with kqp and Tansu for real.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from .names import unique_topic
from .net import read_until_eof, split_host_port
from .relay import RecordingRelay, _FrameSplitter, parse_request_header


def request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: bytes = b"") -> bytes:
    raw = client_id.encode() if client_id is not None else b""
    length = len(raw) if client_id is not None else -1
    payload = struct.pack(">hhih", api_key, version, correlation_id, length) + raw + body
    return struct.pack(">i", len(payload)) + payload


class _FakeBroker(socketserver.BaseRequestHandler):
    """Answers every request frame with a frame holding just its correlation id and 4 bytes."""

    def handle(self) -> None:
        splitter = _FrameSplitter()
        while data := self.request.recv(65536):
            for frame in splitter.feed(data):
                (correlation_id,) = struct.unpack_from(">i", frame, 4)
                self.request.sendall(struct.pack(">ii", 8, correlation_id) + b"resp")


@pytest.fixture
def fake_broker() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _FakeBroker)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address
    server.shutdown()
    server.server_close()


def test_parse_request_header_reads_the_common_prefix() -> None:
    frame = request(0, 9, 1234, "spark-writer", body=b"\x00\x01rest")[4:]
    assert parse_request_header(frame) == (0, 9, 1234, "spark-writer")
    assert parse_request_header(request(18, 3, 1, None)[4:]) == (18, 3, 1, None)
    # A client id longer than the frame is reported as unknown, not as garbage text.
    bogus = struct.pack(">hhih", 3, 1, 1, 500) + b"ab"
    assert parse_request_header(bogus) == (3, 1, 1, None)


def test_frame_splitter_whole_byte_by_byte_and_with_trailing_bytes() -> None:
    stream = request(0, 9, 1, "a") + request(1, 12, 2, "b") + request(3, 12, 3, "c")
    whole = _FrameSplitter().feed(stream)
    assert [parse_request_header(f)[2] for f in whole] == [1, 2, 3]
    splitter = _FrameSplitter()
    one_by_one = [frame for i in range(len(stream)) for frame in splitter.feed(stream[i : i + 1])]
    assert one_by_one == whole
    partial = _FrameSplitter()
    assert len(partial.feed(stream + request(0, 9, 4, "d")[:7])) == 3  # the 4th is incomplete


def test_relay_forwards_and_timestamps_every_frame(fake_broker: tuple[str, int]) -> None:
    with RecordingRelay(*fake_broker) as relay, \
            socket.create_connection(("127.0.0.1", relay.port), timeout=5) as sock:
        before = time.monotonic()
        # Two requests in one segment, then one split mid-header: framing must not care.
        sock.sendall(request(0, 9, 1, "p") + request(1, 12, 2, "p"))
        third = request(3, 1, 3, "q")
        sock.sendall(third[:5])
        time.sleep(0.05)  # make the split land in two reads at the relay
        sock.sendall(third[5:])
        replies = [struct.unpack(">ii4s", sock.recv(12, socket.MSG_WAITALL)) for _ in range(3)]
        after = time.monotonic()

        assert [r[1] for r in replies] == [1, 2, 3]
        seen = relay.requests()
        assert [(r.api_key, r.api_version, r.correlation_id, r.client_id) for r in seen] == [
            (0, 9, 1, "p"), (1, 12, 2, "p"), (3, 1, 3, "q")]
        assert all(before <= r.at <= after for r in seen)
        assert [r.at for r in seen] == sorted(r.at for r in seen)
        assert {r.connection for r in seen} == {1}
        assert [r.correlation_id for r in relay.responses()] == [1, 2, 3]
        assert relay.requests(client_id="q")[0].correlation_id == 3
        assert [r.correlation_id for r in relay.requests(api_key=1)] == [2]


def test_relay_close_connections_drops_the_client(fake_broker: tuple[str, int]) -> None:
    with RecordingRelay(*fake_broker) as relay, \
            socket.create_connection(("127.0.0.1", relay.port), timeout=5) as sock:
        sock.sendall(request(18, 0, 1, "x"))
        sock.recv(12, socket.MSG_WAITALL)
        relay.close_connections()
        _, closed = read_until_eof(sock, 5)
        assert closed
        assert relay.connection_count == 1


@pytest.mark.e2e
def test_tansu_relay_sees_every_upstream_request_kqp_makes(tansu_relay, kqp) -> None:
    relay, upstream = tansu_relay
    proxy = kqp(upstream)
    topic = unique_topic("relayed")
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "client.id": "relay-check",
                         "allow.auto.create.topics": True})
    producer.produce(topic, b"v")
    assert producer.flush(20) == 0
    produce_requests = relay.requests(api_key=0, client_id="relay-check")
    assert produce_requests, f"no Produce from the client reached the relay: {relay.requests()[-5:]}"
    # Tansu advertised the relay, so kqp's broker connection went through it as well.
    _, relay_port = split_host_port(relay.address)
    assert split_host_port(upstream)[1] == relay_port
