"""Malformed client input and a failing upstream, over raw sockets against a running kqp (issue 2).

A peer's mistake must cost exactly that peer its connection: kqp closes it (the client reads EOF),
logs one line naming the peer and the reason, and keeps serving everyone else, which a real
client round trip after each case proves. Each case names the one reason kqp must give, word for
word: a wrong diagnosis (a negative size reported as too large, say) is a bug too. The oversized
frame is refused from its length prefix alone (no body is ever sent), which shows kqp checks
`max_frame_bytes` before buffering. When the upstream dies, or cannot be reached, clients must be
closed promptly, not left hanging.

Issue #15's list (random bytes, lying lengths, truncated frames, unknown API keys and versions,
huge client ids and header fields, a flood of connections) is also sent all in one run while a
real client (librdkafka) produces throughout: every garbage connection is closed, named in one log
line and counted as `protocol_error`, and the producer keeps delivering.
"""

from __future__ import annotations

import random
import re
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from helpers.kqp_process import KqpProcess
from helpers.names import unique_topic
from helpers.net import free_port, read_until_eof, split_host_port
from helpers.observability import metrics_url, sample, scrape
from helpers.steady_producer import SteadyProducer
from helpers.topics import ensure_topic
from upstreams import launch

from kqp.protocol.apis import ApiKey, decodable_range

pytestmark = pytest.mark.e2e

MAX_FRAME = 4096
CLOSE_WITHIN = 5.0  # seconds: "promptly", with room for a loaded 2-core CI machine


def request_header(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"raw") -> bytes:
    """A request header v1 (classic client id string): valid for every non-flexible request."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


API_VERSIONS_V0 = framed(request_header(ApiKey.ApiVersions, 0, correlation_id=7))

# name -> (bytes to send, half-close after sending, the reason kqp's log line must end with)
BAD_INPUT: dict[str, tuple[bytes, bool, str]] = {
    "negative-frame-length": (struct.pack(">i", -5), False, "bad frame from client: negative frame size -5"),
    # Only the 4-byte prefix: a proxy that waited for the body before checking would hang here.
    "frame-above-max-frame-bytes": (
        struct.pack(">i", MAX_FRAME + 1), False,
        f"bad frame from client: frame size {MAX_FRAME + 1} exceeds the maximum of {MAX_FRAME} bytes"),
    # 4 + 10 bytes of a 104-byte frame, then the client closes its side
    "truncated-frame-then-close": (
        struct.pack(">i", 100) + b"0123456789", True,
        "truncated frame: the client closed the connection mid-frame (14 bytes of it received)"),
    "unknown-api-key": (framed(request_header(9999, 0)), False, "bad request from client: unknown api key 9999"),
    "unsupported-version": (
        framed(request_header(ApiKey.Metadata, 99)), False,
        f"bad request from client: api key 3 version 99 is outside kqp's range {decodable_range(ApiKey.Metadata)}"),
    # Metadata v1 whose client id claims 500 bytes and carries 2: the header cannot be decoded.
    "undecodable-header": (framed(struct.pack(">hhih", ApiKey.Metadata, 1, 1, 500) + b"ab"), False,
                           "bad request from client: client id runs past the end of the frame"),
}


# More of issue #15's garbage: name -> (bytes, half-close after sending). Only a frame that is not
# over is half-closed: any other must be closed by kqp from the bytes alone.
_RNG = random.Random(15)
MORE_GARBAGE: dict[str, tuple[bytes, bool]] = {
    **{f"random-bytes-{i}": (_RNG.randbytes(_RNG.randrange(1, 300)), True) for i in range(4)},
    "zero-length": (struct.pack(">i", 0), False),
    "length-shorter-than-a-header": (struct.pack(">i", 3) + b"abc", False),
    "length-longer-than-what-follows": (struct.pack(">i", 200) + request_header(ApiKey.Metadata, 1), True),
    "huge-client-id-claimed": (framed(struct.pack(">hhih", ApiKey.Metadata, 1, 1, 32767) + b"x" * 100), False),
    # ApiVersions v3 has header v2: one tagged field whose length claims 2^32 - 1 bytes.
    "huge-header-tagged-field": (framed(request_header(ApiKey.ApiVersions, 3) + b"\x01\x00\xff\xff\xff\xff\x0f"),
                                 False),
    "huge-header-tagged-field-count": (framed(request_header(ApiKey.ApiVersions, 3) + b"\xff\xff\xff\xff\x07"),
                                       False),
    "unknown-api-key-negative": (framed(request_header(-3, 0)), False),
    "unknown-version-negative": (framed(request_header(ApiKey.Produce, -1)), False),
}
FLOOD = 100   # connections at once, each sending random bytes, then half-closing


def send_garbage(address: str, payload: bytes, half_close: bool = True) -> tuple[str, bool]:
    """Send `payload` (then half-close) and wait for kqp to close: (this socket's peer name, closed)."""
    with socket.create_connection(split_host_port(address), timeout=CLOSE_WITHIN) as sock:
        peer = "{}:{}".format(*sock.getsockname())
        sock.sendall(payload)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        _, closed = read_until_eof(sock, CLOSE_WITHIN)
        return peer, closed


def client_round_trip(bootstrap: str, upstream_kind: str) -> None:
    """A real client still gets full service: produce 5 messages, read them back by assignment."""
    topic = unique_topic("alive")
    ensure_topic(bootstrap, topic, 1, upstream_kind=upstream_kind)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(topic, key=b"k", value=f"v{i}".encode(), partition=0)
    assert producer.flush(20) == 0, "a normal client could not produce through kqp"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("alive-g"),
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(values) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(5)]


def lines_naming(proxy: KqpProcess, peer: str) -> list[str]:
    # The peer's port is unique on the machine while its socket lives; match it as a whole token.
    pattern = re.compile(rf"{re.escape(peer)}(?!\d)")
    return [line for line in proxy.log_lines() if pattern.search(line)]


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_closes_only_that_connection(case: str, tansu: str, kqp) -> None:
    payload, half_close, reason = BAD_INPUT[case]
    proxy = kqp(tansu, max_frame_bytes=MAX_FRAME)
    with socket.create_connection(split_host_port(proxy.bootstrap), timeout=5) as sock:
        peer = "{}:{}".format(*sock.getsockname())
        sock.sendall(payload)
        if half_close:
            sock.shutdown(socket.SHUT_WR)  # "then close", while we can still see kqp's side close
        _, closed = read_until_eof(sock, CLOSE_WITHIN)
        assert closed, f"{case}: kqp kept the connection open for {CLOSE_WITHIN}s"

    deadline = time.monotonic() + 5
    while not lines_naming(proxy, peer) and time.monotonic() < deadline:
        time.sleep(0.05)
    named = lines_naming(proxy, peer)
    assert len(named) == 1, f"{case}: expected one log line naming {peer}, got {named}\n{proxy.logs()}"
    assert named[0].rstrip().endswith(f"closing client {peer} on bootstrap: {reason}"), \
        f"{case}: expected the reason {reason!r}, got: {named[0]}"

    client_round_trip(proxy.bootstrap, tansu.kind)
    assert proxy.running


def test_future_api_versions_request_gets_unsupported_version_answer(tansu: str, kqp) -> None:
    """Not bad input: ApiVersions at a version kqp does not know is answered as Kafka does (KIP-511).

    The broker replies with a v0 response carrying UNSUPPORTED_VERSION (35) and its ApiVersions
    range, so a newer client can retry lower instead of being cut off.
    """
    proxy = kqp(tansu)
    # ApiVersions v9 (flexible): header v2 (client id, empty tagged fields), compact-string body.
    body = request_header(ApiKey.ApiVersions, 9, correlation_id=42) + b"\x00" + b"\x04kqp" + b"\x021" + b"\x00"
    with socket.create_connection(split_host_port(proxy.bootstrap), timeout=5) as sock:
        sock.sendall(framed(body))
        size, correlation_id, error_code = struct.unpack(">iih", _recv_exactly(sock, 10))
        rest = _recv_exactly(sock, size - 6)
        assert correlation_id == 42
        assert error_code == 35
        (count,) = struct.unpack_from(">i", rest, 0)
        ranges = [struct.unpack_from(">hhh", rest, 4 + 6 * i) for i in range(count)]
        assert any(api == ApiKey.ApiVersions and low == 0 and high >= 3 for api, low, high in ranges), ranges
        # The connection stays usable: a v0 request on it is answered too.
        sock.sendall(API_VERSIONS_V0)
        size, correlation_id, error_code = struct.unpack(">iih", _recv_exactly(sock, 10))
        assert (correlation_id, error_code) == (7, 0)


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, f"connection closed after {len(data)} of {count} bytes"
        data += chunk
    return data


def test_upstream_killed_mid_connection_closes_client_promptly(tmp_path: Path, kqp) -> None:
    # A Tansu of this test's own: killing the session-wide one would break other tests.
    with launch.tansu(tmp_path / "tansu-doomed.log") as upstream:
        proxy = kqp(upstream, upstream={"connect_timeout_ms": 1000})
        sock = socket.create_connection(split_host_port(proxy.bootstrap), timeout=5)
        sock.sendall(API_VERSIONS_V0)
        size, correlation_id = struct.unpack(">ii", _recv_exactly(sock, 8))
        assert correlation_id == 7
        _recv_exactly(sock, size - 4)
    # Leaving the block killed Tansu while our connection (and kqp's upstream one) was open.
    with sock:
        _, closed = read_until_eof(sock, CLOSE_WITHIN)
        assert closed, f"client connection still open {CLOSE_WITHIN}s after the upstream died"

    # A client arriving after the upstream is gone is closed promptly too, not left waiting.
    with socket.create_connection(split_host_port(proxy.bootstrap), timeout=5) as late:
        late.sendall(API_VERSIONS_V0)
        started = time.monotonic()
        _, closed = read_until_eof(late, CLOSE_WITHIN)
        assert closed, f"new client still open {CLOSE_WITHIN}s after connecting to a dead upstream"
        assert time.monotonic() - started < CLOSE_WITHIN


def test_unreachable_upstream_is_reported_and_sigterm_still_exits_cleanly(kqp) -> None:
    closed_port = free_port()  # nothing listens here
    proxy = kqp(f"127.0.0.1:{closed_port}", wait="none", upstream={"connect_timeout_ms": 500},
                shutdown_grace_ms=2000)
    line = proxy.wait_for_log(f"127.0.0.1:{closed_port}", timeout=10)
    assert re.search(r"refused|unreachable|no upstream", line, re.IGNORECASE), line
    # No client may be accepted and left hanging while there is no upstream to serve it.
    host, port = split_host_port(proxy.bootstrap)
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.sendall(API_VERSIONS_V0)
            _, closed = read_until_eof(sock, CLOSE_WITHIN)
            assert closed, "kqp accepted a client with no upstream and left it open"
    except ConnectionRefusedError:
        pass  # not listening before the upstream answers: equally prompt
    assert proxy.stop() == 0, proxy.logs()


def test_every_kind_of_garbage_ends_only_its_connection_while_a_real_client_produces(tansu: str, kqp) -> None:
    proxy = kqp(tansu, max_frame_bytes=MAX_FRAME, metrics={"listen": "127.0.0.1:0"})
    url = metrics_url(proxy)
    payloads = {**{name: (payload, half) for name, (payload, half, _) in BAD_INPUT.items()}, **MORE_GARBAGE}
    with SteadyProducer(proxy.bootstrap, tansu.kind) as producer:
        peers = {}
        for name, (payload, half_close) in payloads.items():
            peer, closed = send_garbage(proxy.bootstrap, payload, half_close)
            assert closed, f"{name}: kqp kept the connection open for {CLOSE_WITHIN}s"
            peers[name] = peer
        producer.progressed()
        flood_rng = random.Random(1515)
        flood = [flood_rng.randbytes(flood_rng.randrange(1, 300)) for _ in range(FLOOD)]
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda payload: send_garbage(proxy.bootstrap, payload), flood))
        assert all(closed for _, closed in results), "a flooding connection was left open"
        producer.progressed()
        for name, peer in peers.items():
            deadline = time.monotonic() + 5
            while not lines_naming(proxy, peer) and time.monotonic() < deadline:
                time.sleep(0.05)
            named = lines_naming(proxy, peer)
            assert len(named) == 1 and re.search(r": (bad (frame|request) from client|truncated frame)", named[0]), \
                f"{name}: expected one line naming {peer} with the reason, got {named}"
        closed_as = sample(scrape(url), "kqp_connections_closed_total", reason="protocol_error")
        assert closed_as == len(payloads) + FLOOD, f"protocol_error closes: {closed_as}"
        assert not sample(scrape(url), "kqp_connections_closed_total", reason="internal_error")
    assert proxy.running
