"""The wire tap itself: framing, labels, timestamps, address rewriting, throttles, closes, and kqp with Tansu.

Quota tests rest their strongest claims on what the tap saw, so it is tested on its own first:
against a scripted fake broker (exact bytes, any chunking), then in front of Tansu with kqp for real.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer
from kafka.protocol.metadata import ApiVersionsResponse

from kqp.protocol.apis import ApiKey
from kqp.protocol.frames import FrameReader
from kqp.protocol.messages import encode_request

from .names import unique_topic
from .net import read_until_eof, split_host_port
from .wire_tap import WireTap, address_substitutions, request_labels

Answer = Callable[[int, int, int, tuple[str, int]], bytes | None]  # (api key, version, corr, own address) -> body


class HangUp(Exception):
    """Raised by an `Answer` to make the fake broker close the connection instead of answering."""


def request(api_key: int, version: int, correlation_id: int, client_id: str | None, **fields: object) -> bytes:
    return encode_request(api_key, version, correlation_id, client_id, **fields)  # type: ignore[arg-type]


def metadata(correlation_id: int, client_id: str | None = "c") -> bytes:
    return request(ApiKey.Metadata, 1, correlation_id, client_id, topics=[])


def echo_id(api_key: int, version: int, correlation_id: int, own: tuple[str, int]) -> bytes:
    return b"resp"


@contextlib.contextmanager
def fake_broker(answer: Answer) -> Iterator[tuple[str, int]]:
    """A broker that answers each request frame with its correlation id and `answer(...)` (None: no answer)."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            reader = FrameReader(1 << 20)
            while data := self.request.recv(65536):
                reader.received(data)
                while (frame := reader.next_frame()) is not None:
                    api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 4)
                    try:
                        body = answer(api_key, version, correlation_id, server.server_address)
                    except HangUp:
                        return
                    if body is not None:
                        self.request.sendall(struct.pack(">ii", 4 + len(body), correlation_id) + body)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def broker() -> Iterator[tuple[str, int]]:
    with fake_broker(echo_id) as address:
        yield address


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
    return sock.recv(size, socket.MSG_WAITALL)


def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_request_labels_come_from_the_header_even_for_unknown_apis() -> None:
    frame = memoryview(request(ApiKey.Produce, 9, 1234, "spark-writer", acks=1, timeout_ms=1, topic_data=[]))
    assert request_labels(frame)[:4] == (ApiKey.Produce, 9, 1234, "spark-writer")
    # An api key kqp.protocol does not know: the common prefix, and no client id.
    unknown = memoryview(struct.pack(">ihhih", 10, 999, 1, 7, -1))
    assert request_labels(unknown) == (999, 1, 7, None, None)


def test_tap_forwards_and_timestamps_every_frame(broker: tuple[str, int]) -> None:
    with WireTap("t") as tap, socket.create_connection(split_host_port(tap.relay(broker)), timeout=5) as sock:
        before = time.monotonic()
        # Two requests in one segment, then one split mid-header: framing must not care.
        sock.sendall(metadata(1, "p") + metadata(2, "p"))
        third = request(ApiKey.ApiVersions, 0, 3, "q")
        sock.sendall(third[:5])
        time.sleep(0.05)  # make the split land in two reads at the tap
        sock.sendall(third[5:])
        replies = [struct.unpack(">i4s", read_frame(sock)) for _ in range(3)]
        after = time.monotonic()

        assert [r[0] for r in replies] == [1, 2, 3]
        seen = tap.requests()
        assert [(r.api_key, r.api_version, r.correlation_id, r.client_id) for r in seen] == [
            (ApiKey.Metadata, 1, 1, "p"), (ApiKey.Metadata, 1, 2, "p"), (ApiKey.ApiVersions, 0, 3, "q")]
        assert [r.size for r in seen] == [len(metadata(1, "p"))] * 2 + [len(third)]
        assert all(before <= r.at <= after for r in seen)
        assert [r.at for r in seen] == sorted(r.at for r in seen)
        assert {r.connection for r in seen} == {1}
        wait_for(lambda: len(tap.responses()) == 3)
        answers = tap.responses()
        assert [(r.correlation_id, r.api_key, r.size) for r in answers] == [
            (1, ApiKey.Metadata, 12), (2, ApiKey.Metadata, 12), (3, ApiKey.ApiVersions, 12)]
        assert all(r.request_at <= r.at for r in answers)
        assert tap.requests(client_id="q")[0].correlation_id == 3
        assert [r.correlation_id for r in tap.requests(api_key=ApiKey.Metadata)] == [1, 2]


def test_tap_rewrites_the_targets_address_in_both_encodings() -> None:
    def own_address(api_key: int, version: int, correlation_id: int, own: tuple[str, int]) -> bytes:
        classic, compact = (old for old, _ in address_substitutions(own, ("x", 1)))
        return b"[" + classic + b"|" + compact + b"]"

    with fake_broker(own_address) as target:
        with WireTap("t") as tap, socket.create_connection(split_host_port(tap.relay(target)), timeout=5) as sock:
            sock.sendall(metadata(1))
            body = read_frame(sock)[4:]
            hop = split_host_port(tap.hops[target])
            classic, compact = (new for _, new in address_substitutions(target, hop))
            assert body == b"[" + classic + b"|" + compact + b"]"


def test_tap_reads_throttle_and_knows_acks_zero_has_no_response() -> None:
    def answer(api_key: int, version: int, correlation_id: int, own: tuple[str, int]) -> bytes | None:
        if api_key == ApiKey.Produce:
            return b""  # a buggy broker that answers acks=0
        return bytes(ApiVersionsResponse(error_code=0, api_keys=[], throttle_time_ms=250).encode(version=1))

    with fake_broker(answer) as target:
        with WireTap("t") as tap, socket.create_connection(split_host_port(tap.relay(target)), timeout=5) as sock:
            sock.sendall(request(ApiKey.Produce, 7, 1, "p", transactional_id=None, acks=0, timeout_ms=1,
                                 topic_data=[]))
            assert struct.unpack_from(">i", read_frame(sock))[0] == 1
            sock.sendall(request(ApiKey.ApiVersions, 1, 2, "p"))
            assert struct.unpack_from(">i", read_frame(sock))[0] == 2
            produce, versions = tap.requests()
            assert (produce.expects_response, versions.expects_response) == (False, True)
            wait_for(lambda: len(tap.responses()) == 2)
            stray, answered = tap.responses()
            # acks=0 owes no response, so the one that came answers nothing the tap saw
            assert (stray.correlation_id, stray.api_key, stray.throttle_ms) == (1, -1, None)
            assert (answered.api_key, answered.throttle_ms) == (ApiKey.ApiVersions, 250)


def test_tap_names_who_closed_and_what_was_owed() -> None:
    def silent_on_3(api_key: int, version: int, correlation_id: int, own: tuple[str, int]) -> bytes | None:
        return None if correlation_id == 3 else b"resp"

    with fake_broker(silent_on_3) as target:
        with WireTap("t") as tap:
            hop = split_host_port(tap.relay(target))
            with socket.create_connection(hop, timeout=5) as sock:
                sock.sendall(metadata(1))
                read_frame(sock)
                sock.sendall(metadata(3))  # never answered
                wait_for(lambda: len(tap.requests()) == 2)
            wait_for(lambda: tap.connections()[0].closed_at is not None)
            first = tap.connections()[0]
            assert first.closed_by == "client"
            assert [key for key, _ in first.unanswered_at_close] == [ApiKey.Metadata]
            open_at_stop = socket.create_connection(hop, timeout=5)
            wait_for(lambda: len(tap.connections()) == 2)
        assert tap.connections()[1].closed_by == "tap"
        _, closed = read_until_eof(open_at_stop, 5)
        assert closed
        open_at_stop.close()


def test_a_refused_or_closing_target_is_named() -> None:
    def hang_up(api_key: int, version: int, correlation_id: int, own: tuple[str, int]) -> bytes:
        raise HangUp

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = unused.getsockname()
    with WireTap("t") as tap, fake_broker(hang_up) as closing:
        for target in (dead, closing):
            with socket.create_connection(split_host_port(tap.relay(target)), timeout=5) as sock:
                sock.sendall(metadata(1))
                _, closed = read_until_eof(sock, 5)
                assert closed
        wait_for(lambda: all(c.closed_by is not None for c in tap.connections()))
        refused, closed_on_us = tap.connections()
        assert (refused.closed_by, closed_on_us.closed_by) == ("target", "target")
        assert [key for key, _ in closed_on_us.unanswered_at_close] == [ApiKey.Metadata]


@pytest.mark.e2e
def test_kqp_behind_and_in_front_of_taps_with_tansu(tansu, kqp) -> None:
    """Every upstream connection kqp opens goes through the upstream tap (Tansu's advertised
    address is rewritten), and the client's requests reach Tansu through it."""
    with WireTap("upstream") as tap:
        relayed = tap.relay(tansu.addresses[0])
        proxy = kqp(relayed)
        topic = unique_topic("tapped")
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "client.id": "tap-check",
                             "allow.auto.create.topics": True})
        producer.produce(topic, b"v")
        assert producer.flush(20) == 0
        produce_requests = tap.requests(api_key=ApiKey.Produce, client_id="tap-check")
        assert produce_requests, f"no Produce from the client reached the tap: {tap.requests()[-5:]}"
        assert {r.hop for r in tap.requests()} == {relayed}
        answered = {r.correlation_id for r in tap.responses(api_key=ApiKey.Produce)}
        assert {r.correlation_id for r in produce_requests} <= answered
