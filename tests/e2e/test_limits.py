"""`limits:` hit on purpose over real sockets, while a real client (librdkafka) produces throughout.

Each limit is answered as README "Limits" documents it: a connection over `max_connections` or
`max_connections_per_ip` is closed at once and never served; one over
`connection_creation_rate_per_ip` is held unread for its throttle, then closed; each refusal is
counted in `kqp_connections_closed_total{reason}` and logged at most once a second per cause; and
the producer keeps delivering. `max_in_flight_per_connection` pauses reading, it closes nothing, and
the upstream (behind the wire tap there) never holds more than the cap unanswered.

The producer connects from 127.0.0.1; the misbehaving sockets are bound to other loopback addresses
(127.0.0.2, ...: Linux routes all of 127/8 to lo) so per-IP limits see them as other clients.
"""

from __future__ import annotations

import math
import os
import ssl
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.fault_tap import FaultTap
from helpers.limit_probes import CLOSE_WITHIN, closed_total, connect_from, refused, served
from helpers.observability import metrics_url, scrape
from helpers.quota_frames import read_responses
from helpers.steady_producer import SteadyProducer
from helpers.tls import ENG_RULES, TlsFiles
from helpers.wire_tap import WireTap

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request

pytestmark = pytest.mark.e2e

IN_FLIGHT_CAP = 3


def open_connections(url: str) -> float:
    return sum(value for (name, _), value in scrape(url).items() if name == "kqp_connections")


def refusal_lines(proxy: Any, cause: str) -> list[str]:
    return [line for line in proxy.log_lines() if "refused client" in line and cause in line]


def at_most_once_a_second(lines: list[str], seconds: float) -> None:
    assert 1 <= len(lines) <= math.ceil(seconds) + 1, f"{len(lines)} lines in {seconds:.1f}s: {lines}"


def rewrite_config(proxy: Any, **changes: Any) -> None:
    """A new file renamed over the old one, as a ConfigMap update does; kqp reloads it live."""
    proxy.config.update(changes)
    tmp = proxy.config_path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(proxy.config, sort_keys=False))
    os.replace(tmp, proxy.config_path)


def start(kqp: Any, upstream: Any, **limits: Any) -> tuple[Any, str]:
    proxy = kqp(upstream, limits=limits, metrics={"listen": "127.0.0.1:0"})
    return proxy, metrics_url(proxy)


def test_max_connections_per_ip_closes_at_once_and_reloads_live(tansu: Any, kqp: Any) -> None:
    proxy, url = start(kqp, tansu, max_connections_per_ip=4)
    with SteadyProducer(proxy.bootstrap, tansu.kind) as producer:
        assert open_connections(url) < 4, "the producer alone would hit the per-IP limit"
        admitted = [connect_from("127.0.0.2", proxy.bootstrap) for _ in range(4)]
        assert all(served(sock) for sock in admitted)
        began = time.monotonic()
        for _ in range(10):
            with connect_from("127.0.0.2", proxy.bootstrap) as sock:
                assert refused(sock) < CLOSE_WITHIN
        elapsed = time.monotonic() - began
        producer.progressed()
        assert closed_total(url, "max_connections_per_ip") == 10
        at_most_once_a_second(refusal_lines(proxy, "max_connections_per_ip=4"), elapsed)
        # Another IP is another count.
        with connect_from("127.0.0.3", proxy.bootstrap) as other:
            assert served(other)
        # A closed connection frees its place.
        admitted.pop().close()
        deadline = time.monotonic() + CLOSE_WITHIN
        while True:
            with connect_from("127.0.0.2", proxy.bootstrap) as sock:
                if served(sock):
                    break
            assert time.monotonic() < deadline, "a released place was never given back"
        # Raised live: a fifth connection from the same IP is served.
        lines = len(proxy.log_lines())
        rewrite_config(proxy, limits={"max_connections_per_ip": 5})
        proxy.wait_for_log("config reloaded", after=lines)
        admitted += [connect_from("127.0.0.2", proxy.bootstrap) for _ in range(2)]
        assert all(served(sock) for sock in admitted[-2:])
        producer.progressed()
        for sock in admitted:
            sock.close()


def test_max_connections_closes_at_once_and_the_producer_is_served_throughout(tansu: Any, kqp: Any) -> None:
    proxy, url = start(kqp, tansu, max_connections=8)
    with SteadyProducer(proxy.bootstrap, tansu.kind) as producer:
        mine = int(open_connections(url))
        assert mine < 8
        admitted = [connect_from("127.0.0.2", proxy.bootstrap) for _ in range(8 - mine)]
        assert all(served(sock) for sock in admitted)
        for ip in ("127.0.0.2", "127.0.0.3"):
            with connect_from(ip, proxy.bootstrap) as sock:
                refused(sock)
        producer.progressed()
        assert closed_total(url, "max_connections") == 2
        assert refusal_lines(proxy, "max_connections=8")
        for sock in admitted:
            sock.close()
        producer.progressed()


def test_creation_rate_holds_the_connection_for_its_throttle_then_closes_it(tansu: Any, kqp: Any) -> None:
    # 1 connection/s over Kafka's 11 x 1 s windows: a fresh IP's first 10 read 10 / 10 s = 1/s and
    # are served; the 11th reads 1.1/s, throttle (1.1 - 1) / 1 x 10 s = 1 s (the one-window cap).
    proxy, url = start(kqp, tansu, connection_creation_rate_per_ip=1)
    with SteadyProducer(proxy.bootstrap, tansu.kind) as producer:
        for _ in range(10):
            with connect_from("127.0.0.4", proxy.bootstrap) as sock:
                assert served(sock)
        with connect_from("127.0.0.4", proxy.bootstrap) as sock:
            held = refused(sock)   # sent a request: never read, never answered
        assert held >= 0.5, f"closed after {held:.3f}s: the throttle was not applied"
        producer.progressed()
        assert closed_total(url, "connection_creation_rate") == 1
        assert refusal_lines(proxy, "connection_creation_rate_per_ip=1/s: closed after the throttle")
        with connect_from("127.0.0.5", proxy.bootstrap) as other:   # another IP has its own rate
            assert served(other)


def most_unanswered(tap: WireTap, client_id: str) -> int:
    """The most requests from `client_id` the upstream had received and not yet answered, at any moment.

    A response is logged by the tap before it goes on towards kqp, so kqp's next request can only
    follow it: on equal timestamps the response is counted first."""
    requests = tap.requests(client_id=client_id)
    connections = {r.connection for r in requests}   # kqp gives each client connection its own upstream one
    events = sorted([(r.at, 1, 1) for r in requests]
                    + [(r.at, 0, -1) for r in tap.responses() if r.connection in connections])
    most = unanswered = 0
    for _, _, step in events:
        unanswered += step
        most = max(most, unanswered)
    return most


def test_max_in_flight_pauses_reading_and_answers_every_request(fault_tap: FaultTap, tansu: Any, kqp: Any) -> None:
    # The upstream through the tap, which logs when each request reached Tansu and each answer left it.
    proxy, url = start(kqp, ",".join(fault_tap.hops.values()), max_in_flight_per_connection=IN_FLIGHT_CAP)
    with SteadyProducer(proxy.bootstrap, tansu.kind) as producer:
        with connect_from("127.0.0.2", proxy.bootstrap) as sock:
            # 20 Metadata requests in one write: kqp forwards at most the cap at a time, answers all, in order.
            sock.sendall(b"".join(encode_request(ApiKey.Metadata, 1, cid, "pipeliner", topics=[])
                                  for cid in range(1, 21)))
            answered = [struct.unpack_from(">i", frame)[0] for _, frame in read_responses(sock, 20, CLOSE_WITHIN)]
            assert answered == list(range(1, 21))
        producer.progressed()
    assert len(fault_tap.requests(client_id="pipeliner")) == 20
    assert most_unanswered(fault_tap, "pipeliner") <= IN_FLIGHT_CAP
    assert closed_total(url, "protocol_error") == 0


def tls_connect_from(ip: str, address: str, context: ssl.SSLContext) -> ssl.SSLSocket:
    """A TLS connection from `ip`, retried briefly while kqp may still be giving a place back."""
    deadline = time.monotonic() + CLOSE_WITHIN
    while True:
        try:
            return context.wrap_socket(connect_from(ip, address), server_hostname="127.0.0.1")
        except (ssl.SSLError, OSError):
            assert time.monotonic() < deadline, f"no place for a TLS connection from {ip}"
            time.sleep(0.05)


def test_a_tls_listener_checks_limits_before_the_handshake(tansu: Any, kqp: Any, tmp_path: Path) -> None:
    certs = TlsFiles(tmp_path / "tls")
    client = certs.client("alice")
    proxy = kqp(tansu, limits={"max_connections_per_ip": 3}, metrics={"listen": "127.0.0.1:0"},
                tls=certs.listener(principal_mapping_rules=ENG_RULES))
    url = metrics_url(proxy)
    context = certs.context(client)
    with SteadyProducer(proxy.bootstrap, tansu.kind, topic_via=str(tansu), **certs.librdkafka(client)) as producer:
        # Plaintext clients fail their handshakes: refused as tls_plaintext, each giving its place back.
        for _ in range(3):
            with connect_from("127.0.0.2", proxy.bootstrap) as plain:
                refused(plain)
        held = [tls_connect_from("127.0.0.2", proxy.bootstrap, context) for _ in range(3)]
        assert all(served(sock) for sock in held)
        # Over the per-IP limit: closed before any TLS is spoken.
        with connect_from("127.0.0.2", proxy.bootstrap) as fourth:
            try:
                context.wrap_socket(fourth, server_hostname="127.0.0.1").close()
                handshake = "completed"
            except (ssl.SSLError, OSError):
                handshake = "refused"
        assert handshake == "refused"
        producer.progressed()
        for sock in held:
            sock.close()
    assert closed_total(url, "max_connections_per_ip") == 1
    assert closed_total(url, "tls_plaintext") == 3
