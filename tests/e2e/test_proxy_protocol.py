"""kqp behind a real HAProxy (Debian's `haproxy`) that writes the PROXY protocol header.

HAProxy listens on 127.0.0.10, on the same port numbers as kqp's listeners on 127.0.0.1 (which
advertise 127.0.0.10: every broker address a client learns is the balancer's): the bootstrap
frontend sends `send-proxy-v2`, each broker's `send-proxy` (v1), so a real client's connections go
through both versions. HAProxy connects to kqp from 127.0.0.1, the one trusted network.

Without the header every connection would count against HAProxy's own address; with it,
`limits.max_connections_per_ip` applies per real client: raw clients bound to 127.0.0.2 and
127.0.0.3 (confluent-kafka cannot bind a source address) each get their share and one more is
refused, counted and logged under the client's address, while a confluent-kafka producer is
served throughout and its messages are consumed back through HAProxy. Then the refusals: a
balancer outside `trusted` (HAProxy with `source 127.0.0.7`), a balancer without the header, a
direct client from outside `trusted`, and a malformed header, each closing its own connection with
its reason counted in `kqp_connections_closed_total`, the producer still served. Last, the same with
TLS on kqp's listeners: HAProxy passes TLS through, so kqp reads the header, then does the handshake,
and the per-IP limit (checked before the handshake) still counts the real clients.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import haproxy
from helpers.clients import confluent_consume, confluent_produce, keyed_messages
from helpers.haproxy import Frontend, HaProxy
from helpers.limit_probes import closed_total, connect_from, refused, served
from helpers.names import unique_group, unique_topic
from helpers.net import free_port, split_host_port
from helpers.observability import metrics_url, scrape
from helpers.steady_producer import SteadyProducer
from helpers.tls import TlsFiles
from helpers.topics import ensure_topic

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not haproxy.available(), reason="haproxy is not installed (apt-get install haproxy)")]

BALANCER = "127.0.0.10"       # where HAProxy listens, and what kqp advertises
UNTRUSTED_SOURCE = "127.0.0.7"
PER_IP = 3


def behind_haproxy(kqp: Any, upstream: Any, directory: Path, **config: Any) -> tuple[Any, str, HaProxy, dict[str, str]]:
    """kqp (PROXY header required from 127.0.0.1) and HAProxy in front of every listener it has."""
    proxy = kqp(upstream, advertised_host=BALANCER, metrics={"listen": "127.0.0.1:0"},
                limits={"max_connections_per_ip": PER_IP},
                proxy_protocol={"mode": "required", "trusted": ["127.0.0.1/32"], "header_timeout_ms": 3000}, **config)
    host, bootstrap_port = split_host_port(proxy.bootstrap)
    brokers = {int(node): int(port) for node, port in
               re.findall(r"broker (\d+) listener on [^ ]+:(\d+)", proxy.logs())}
    assert brokers, proxy.logs()
    frontends = [Frontend("bootstrap", (BALANCER, bootstrap_port), (host, bootstrap_port), "v2")]
    frontends += [Frontend(f"broker{node}", (BALANCER, port), (host, port), "v1") for node, port in brokers.items()]
    frontends += [
        Frontend("untrusted", (BALANCER, free_port(BALANCER)), (host, bootstrap_port), "v1", source=UNTRUSTED_SOURCE),
        Frontend("bare", (BALANCER, free_port(BALANCER)), (host, bootstrap_port), None),
    ]
    balancer = HaProxy(directory, frontends)
    return proxy, metrics_url(proxy), balancer, {f.name: f"{f.bind[0]}:{f.bind[1]}" for f in frontends}


def open_at_kqp(url: str) -> float:
    return sum(value for (name, _), value in scrape(url).items() if name == "kqp_connections")


def wait_until(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)


def test_per_ip_limits_apply_per_real_client_behind_haproxy(tansu: Any, kqp: Any, tmp_path: Path) -> None:
    proxy, url, balancer, front = behind_haproxy(kqp, tansu, tmp_path / "haproxy")
    broker_front = next(address for name, address in front.items() if name.startswith("broker"))
    with balancer, SteadyProducer(front["bootstrap"], tansu.kind) as producer:
        before = open_at_kqp(url)   # the producer's own connections
        held = [connect_from("127.0.0.2", front["bootstrap"]) for _ in range(PER_IP)]
        held += [connect_from("127.0.0.3", broker_front) for _ in range(PER_IP)]
        assert all(served(sock) for sock in held), balancer.output()
        # HAProxy holds all of these (and the producer's) from its one address: without the header
        # kqp would have refused every connection past the third.
        assert open_at_kqp(url) >= before + 2 * PER_IP > PER_IP
        for ip, via in (("127.0.0.2", front["bootstrap"]), ("127.0.0.3", broker_front)):
            with connect_from(ip, via) as sock:
                refused(sock)
        assert closed_total(url, "max_connections_per_ip") == 2
        lines = [line for line in proxy.log_lines() if "refused client" in line and "max_connections_per_ip" in line]
        assert lines and re.search(r"refused client 127\.0\.0\.[23]:\d+ on ", lines[0]), lines
        # A slot is the real client's: one of 127.0.0.2's closes, and 127.0.0.2 is served again.
        held.pop(0).close()
        wait_until(lambda: open_at_kqp(url) <= before + 2 * PER_IP - 1, "kqp saw the close")
        with connect_from("127.0.0.2", front["bootstrap"]) as again:
            assert served(again)
        producer.progressed()
        for sock in held:
            sock.close()
        # A real client's produce and consume through HAProxy (its group's coordinator too).
        topic = unique_topic("behind-haproxy")
        ensure_topic(front["bootstrap"], topic, 1, upstream_kind=tansu.kind)
        messages = keyed_messages(20)
        confluent_produce(front["bootstrap"], topic, messages)
        consumed = confluent_consume(front["bootstrap"], topic, unique_group("behind-haproxy"), 20, 60)
        assert sorted((c.key, c.value) for c in consumed) == sorted(messages)
    assert not producer.errors, producer.errors
    assert closed_total(url, "proxy_header_untrusted") == 0


def test_untrusted_missing_and_malformed_headers_close_with_counted_reasons(tansu: Any, kqp: Any,
                                                                           tmp_path: Path) -> None:
    proxy, url, balancer, front = behind_haproxy(kqp, tansu, tmp_path / "haproxy")
    with balancer, SteadyProducer(front["bootstrap"], tansu.kind) as producer:
        with connect_from("127.0.0.2", front["untrusted"]) as sock:   # a balancer outside `trusted`
            refused(sock)
        with connect_from("127.0.0.2", front["bare"]) as sock:        # a balancer that sends no header
            refused(sock)
        with connect_from("127.0.0.5", proxy.bootstrap) as sock:      # a client going round the balancer
            refused(sock)
        with connect_from("127.0.0.1", proxy.bootstrap) as sock:      # trusted, but not a valid header
            sock.sendall(b"PROXY TCP4 127.0.0.2 127.0.0.1 080 19092\r\n")
            refused(sock)
        wait_until(lambda: closed_total(url, "proxy_header_malformed") == 1, "the malformed header counted")
        assert {reason: closed_total(url, reason) for reason in
                ("proxy_header_untrusted", "proxy_header_missing", "proxy_header_malformed")} == {
            "proxy_header_untrusted": 2, "proxy_header_missing": 1, "proxy_header_malformed": 1}
        producer.progressed()
    assert not producer.errors, producer.errors
    logged = "\n".join(line for line in proxy.log_lines() if "kqp.proxy_protocol" in line)
    assert f"{UNTRUSTED_SOURCE} is not in proxy_protocol.trusted" in logged, logged
    assert "127.0.0.5 is not in proxy_protocol.trusted" in logged, logged
    assert "no PROXY header" in logged and "malformed PROXY header" in logged, logged


def test_on_tls_listeners_the_header_comes_first_and_limits_still_count_real_clients(tansu: Any, kqp: Any,
                                                                                      tmp_path: Path) -> None:
    # HAProxy in TCP mode passes TLS through: its header, then the client's handshake, on one stream.
    certs = TlsFiles(tmp_path / "tls")
    certs.issue_server(hosts=(BALANCER, "127.0.0.1"))
    proxy, url, balancer, front = behind_haproxy(kqp, tansu, tmp_path / "haproxy",
                                                 tls={"cert": str(certs.server_cert), "key": str(certs.server_key)})
    context = certs.context()
    with balancer, SteadyProducer(front["bootstrap"], tansu.kind, topic_via=str(tansu),
                                  **certs.librdkafka()) as producer:
        held = [context.wrap_socket(connect_from("127.0.0.2", front["bootstrap"]), server_hostname=BALANCER)
                for _ in range(PER_IP)]
        assert all(served(sock) for sock in held)
        with pytest.raises(OSError):   # admitted before the handshake, so refused during it
            with context.wrap_socket(connect_from("127.0.0.2", front["bootstrap"]), server_hostname=BALANCER) as over:
                served(over)
        wait_until(lambda: closed_total(url, "max_connections_per_ip") == 1, "the refusal counted")
        with context.wrap_socket(connect_from("127.0.0.3", front["bootstrap"]), server_hostname=BALANCER) as other:
            assert served(other)   # another client is not held to 127.0.0.2's count
        producer.progressed()
        for sock in held:
            sock.close()
    assert not producer.errors, producer.errors
    assert not [r for r in ("tls_plaintext", "tls_handshake_failed") if closed_total(url, r)], proxy.logs()[-3000:]
