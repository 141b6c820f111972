"""TLS towards clients: real clients over SSL through kqp, who they are, and who is refused.

kqp terminates TLS on every listener (bootstrap and per-broker) and talks plaintext to librdkafka's
mock cluster. Certificates are made per test (helpers.tls, trustme): a CA, kqp's certificate for
127.0.0.1, client certificates with chosen subjects, an expired one and one from a CA kqp does not
trust. The principal mapping rule is "the CN, lower-cased, of anyone in OU=eng", so the
certificate CN=Alice,OU=eng,O=Acme is the quota user alice.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.clients import confluent_consume, confluent_produce, kcat_produce, kcat_read, kcat_settings, keyed_messages
from helpers.kcat import run_kcat
from helpers.names import unique_group, unique_topic
from helpers.net import split_host_port
from helpers.observability import sample, scrape, start_with_metrics
from helpers.raw_client import RawConnection, Tally
from helpers.tls import ENG_RULES, TlsFiles

pytestmark = pytest.mark.e2e

API_VERSIONS_V0 = struct.pack(">ihhih", 13, 18, 0, 7, 3) + b"raw"


@pytest.fixture
def certs(tmp_path: Path) -> TlsFiles:
    return TlsFiles(tmp_path / "tls")


def start(kqp: Any, upstream: str, certs: TlsFiles, quotas: dict[str, Any] | None = None,
          extra_args: tuple[str, ...] | list[str] = (), **tls: Any) -> tuple[Any, str]:
    tls.setdefault("principal_mapping_rules", ENG_RULES)
    return start_with_metrics(kqp, upstream, quotas=quotas or {}, tls=certs.listener(**tls), extra_args=extra_args)


def closed_reasons(url: str) -> dict[str, float]:
    """The refusals counted so far (kqp_connections_closed_total's tls_* reasons)."""
    samples = scrape(url)
    return {reason: value for (name, labels), value in samples.items()
            if name == "kqp_connections_closed_total" and value
            and (reason := dict(labels)["reason"]).startswith("tls_")}


def read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed without an answer")
        data += chunk
    return data


def api_versions_over(sock: socket.socket) -> int:
    """Send ApiVersions v0 and read the whole answer; its correlation id (raises if closed)."""
    sock.sendall(API_VERSIONS_V0)
    (size,) = struct.unpack(">i", read_exactly(sock, 4))
    return struct.unpack_from(">i", read_exactly(sock, size))[0]


def tls_socket(bootstrap: str, context: ssl.SSLContext) -> ssl.SSLSocket:
    host, port = split_host_port(bootstrap)
    return context.wrap_socket(socket.create_connection((host, port), timeout=5), server_hostname=host)


def users_seen(url: str) -> set[str]:
    return {dict(labels)["user"] for (name, labels), value in scrape(url).items()
            if name == "kqp_requests_total" and value}


# -- real clients over SSL ------------------------------------------------------------------------

def test_kcat_over_mutual_tls(mock_cluster: str, kqp: Any, certs: TlsFiles) -> None:
    proxy, url = start(kqp, mock_cluster, certs)
    ssl_conf = certs.librdkafka(certs.client("Alice"))
    listing = run_kcat(["-b", proxy.bootstrap, *kcat_settings(ssl_conf), "-L", "-J", "-m", "15"], timeout=30)
    assert listing.returncode == 0, listing.stderr[-2000:]
    upstream_ports = {port for _, port in [split_host_port(a) for a in mock_cluster.split(",")]}
    brokers = [split_host_port(b["name"]) for b in json.loads(listing.stdout)["brokers"]]
    assert brokers and all(host == "127.0.0.1" and port not in upstream_ports for host, port in brokers)

    topic, messages = unique_topic("tls-kcat"), keyed_messages(20)
    kcat_produce(proxy.bootstrap, topic, messages, **ssl_conf)
    assert sorted(kcat_read(proxy.bootstrap, topic, len(messages), **ssl_conf)) == sorted(messages)
    assert users_seen(url) == {"alice"}


def test_confluent_kafka_round_trip_over_mutual_tls(mock_cluster: str, kqp: Any, certs: TlsFiles) -> None:
    proxy, url = start(kqp, mock_cluster, certs)
    conf = certs.librdkafka(certs.client("Alice"))
    topic, messages = unique_topic("tls-confluent"), keyed_messages(60)
    confluent_produce(proxy.bootstrap, topic, messages, **conf)
    got = confluent_consume(proxy.bootstrap, topic, unique_group("tls"), len(messages), 60, **conf)
    assert sorted((c.key, c.value) for c in got) == sorted(messages)
    assert users_seen(url) == {"alice"}


# -- who the user is ------------------------------------------------------------------------------

ALICE_QUOTA = {"window_size_seconds": 0.2, "window_count": 6,
               "entities": [{"user": "alice", "producer_byte_rate": 20_000}]}


def produce_burst(bootstrap: str, context: ssl.SSLContext, client_id: str, topic: str) -> Tally:
    tally = Tally()
    with RawConnection(bootstrap, client_id, Tally(), tls=context) as meta:
        leader = meta.leader_address(topic)
    with RawConnection(leader, client_id, tally, tls=context) as conn:
        for _ in range(3):
            conn.produce(topic, [b"x" * 1000] * 20)   # ~20 KB each: one already over 20 KB/s
    return tally


def test_a_user_quota_throttles_the_mapped_user_only(mock_cluster: str, kqp: Any, certs: TlsFiles) -> None:
    proxy, url = start(kqp, mock_cluster, certs, quotas=ALICE_QUOTA)
    topic = unique_topic("tls-quota")
    alice = produce_burst(proxy.bootstrap, certs.context(certs.client("Alice")), "writer", topic)
    bob = produce_burst(proxy.bootstrap, certs.context(certs.client("Bob")), "writer", topic)
    assert alice.throttled_responses >= 2, alice.throttle_ms
    assert bob.throttle_ms == [0, 0, 0]
    samples = scrape(url)
    assert (sample(samples, "kqp_throttled_responses_total", quota="producer_byte_rate", user="alice",
                   client_id="writer") or 0) >= 2
    assert sample(samples, "kqp_throttled_responses_total", quota="producer_byte_rate", user="bob",
                  client_id="writer") is None
    assert users_seen(url) == {"alice", "bob"}


def test_requested_client_auth_lets_a_client_without_a_certificate_in_as_anonymous(
        mock_cluster: str, kqp: Any, certs: TlsFiles) -> None:
    proxy, url = start(kqp, mock_cluster, certs, client_auth="requested")
    with tls_socket(proxy.bootstrap, certs.context()) as sock:
        assert api_versions_over(sock) == 7
    with tls_socket(proxy.bootstrap, certs.context(certs.client("Alice"))) as sock:
        assert api_versions_over(sock) == 7
    assert users_seen(url) == {"ANONYMOUS", "alice"}


# -- who is refused -------------------------------------------------------------------------------

def refused(bootstrap: str, context: ssl.SSLContext) -> bool:
    """True when kqp closes the connection before answering (TLS 1.3 may let the client finish its
    side of the handshake first, so the refusal can surface only when it reads)."""
    try:
        with tls_socket(bootstrap, context) as sock:
            api_versions_over(sock)
    except (ssl.SSLError, ConnectionError, OSError):
        return True
    return False


def test_a_plaintext_client_is_refused_counted_and_logged_at_most_once_a_second(
        mock_cluster: str, kqp: Any, certs: TlsFiles) -> None:
    proxy, url = start(kqp, mock_cluster, certs)
    started = time.monotonic()
    for _ in range(12):
        with socket.create_connection(split_host_port(proxy.bootstrap), timeout=5) as sock:
            with pytest.raises(ConnectionError):
                api_versions_over(sock)
    elapsed = time.monotonic() - started
    deadline = time.monotonic() + 5
    while closed_reasons(url).get("tls_plaintext") != 12 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert closed_reasons(url) == {"tls_plaintext": 12}
    lines = [line for line in proxy.log_lines() if "refused client" in line]
    assert lines and all("not TLS" in line for line in lines)
    assert len(lines) <= elapsed + 1, f"{len(lines)} log lines in {elapsed:.1f}s:\n" + "\n".join(lines)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])   # each loop has its own TLS implementation
def test_expired_untrusted_and_missing_certificates_are_refused(mock_cluster: str, kqp: Any, certs: TlsFiles,
                                                                loop: str) -> None:
    proxy, url = start(kqp, mock_cluster, certs, extra_args=["--loop", loop])
    assert refused(proxy.bootstrap, certs.context(certs.client("Alice", expired=True)))
    assert refused(proxy.bootstrap, certs.context(certs.client("Alice", untrusted=True)))
    assert refused(proxy.bootstrap, certs.context())
    assert not refused(proxy.bootstrap, certs.context(certs.client("Alice")))
    deadline = time.monotonic() + 5
    while sum(closed_reasons(url).values()) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert closed_reasons(url) == {"tls_certificate_expired": 1, "tls_certificate_rejected": 2}
    logged = proxy.logs()
    assert "client certificate has expired" in logged
    assert "client certificate rejected: unable to get local issuer certificate" in logged
    assert "no client certificate (client_auth: required)" in logged
    assert users_seen(url) == {"alice"}


def test_a_subject_no_rule_maps_is_refused(mock_cluster: str, kqp: Any, certs: TlsFiles) -> None:
    proxy, url = start(kqp, mock_cluster, certs, principal_mapping_rules=ENG_RULES[:1])   # no DEFAULT
    assert refused(proxy.bootstrap, certs.context(certs.client("Olga", unit="ops")))
    assert not refused(proxy.bootstrap, certs.context(certs.client("Alice")))
    assert closed_reasons(url) == {"tls_principal_unmapped": 1}
    assert "no principal_mapping_rules rule applies to 'CN=Olga,OU=ops,O=Acme'" in proxy.logs()


# -- rotation -------------------------------------------------------------------------------------

def served_common_name(bootstrap: str, context: ssl.SSLContext) -> str:
    with tls_socket(bootstrap, context) as sock:
        cert = sock.getpeercert()
    return dict(pair[0] for pair in cert["subject"])["commonName"]


def test_a_rotated_certificate_serves_new_connections(mock_cluster: str, kqp: Any, certs: TlsFiles) -> None:
    proxy, _ = start(kqp, mock_cluster, certs)
    alice = certs.context(certs.client("Alice"))
    assert served_common_name(proxy.bootstrap, alice) == "kqp"
    with tls_socket(proxy.bootstrap, alice) as established:
        assert api_versions_over(established) == 7
        certs.issue_server("kqp-rotated")
        deadline = time.monotonic() + 10
        while served_common_name(proxy.bootstrap, alice) != "kqp-rotated":
            assert time.monotonic() < deadline, f"kqp still serves the old certificate:\n{proxy.logs()[-2000:]}"
            time.sleep(0.2)
        assert api_versions_over(established) == 7, "a connection made before the rotation goes on"
    proxy.wait_for_log("listener certificates reloaded")
