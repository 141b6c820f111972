"""kqp logging in to Apache Kafka's own SASL and TLS listeners, and a client's login passed through.

The session's Kafka node (`kafka_cluster`) has SASL_PLAINTEXT (SCRAM-SHA-256/512 and PLAIN, users
`KAFKA_USERS`), SSL, and MTLS (a client certificate from the test CA required) listeners beside its
PLAINTEXT one. kqp in front of each:

- `upstream.sasl` with each mechanism: clients that know nothing of SASL produce and consume, and see
  only kqp's addresses (the SASL listener's are rewritten);
- a refused login: at start kqp says so and waits (no listener, so no client hangs); while running
  (the password changed on Kafka) each new client connection is closed at once as
  `upstream_auth_failed`, and the password never reaches the log;
- `upstream.tls` verifying Kafka's certificate, presenting its own where Kafka requires one, and the
  two refusals (no certificate for MTLS, a CA that does not sign Kafka's) named in the log;
- `sasl.mode: passthrough`: the client's own login goes to Kafka, which verifies it; kqp charges
  the claimed user's quotas once Kafka accepted it, and a wrong password comes back as Kafka's
  error, the connection counted as `authentication_failed`.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from helpers.clients import DRIVERS
from helpers.names import unique_topic
from helpers.net import accepts, split_host_port
from helpers.observability import sample, sample_reaching, scrape, start_with_metrics
from helpers.sasl_clients import produce, sasl_settings
from helpers.scenarios import keyed_round_trip, metadata_shows_only_kqp
from helpers.tls import TlsFiles
from upstreams.kafka import KAFKA_USERS, KafkaCluster

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request

pytestmark = pytest.mark.e2e

CONFLUENT = DRIVERS["confluent-kafka"]


def login(mechanism: str, user: str = "kqp", password: str | None = None) -> dict[str, Any]:
    return {"sasl": {"mechanism": mechanism, "username": user, "password": password or KAFKA_USERS[user]}}


def served(proxy_bootstrap: str, kafka_listener: str) -> None:
    """A client without SASL or TLS round-trips through kqp, told only of kqp's addresses."""
    metadata_shows_only_kqp(CONFLUENT, proxy_bootstrap, kafka_listener, "kafka")
    keyed_round_trip(CONFLUENT, proxy_bootstrap, "kafka", count=60)


def closed_unanswered(bootstrap: str, timeout: float = 10.0) -> float:
    """Seconds until kqp closes a new connection whose ApiVersions it never answers (AssertionError
    if it answers, or keeps the connection past `timeout`)."""
    started = time.monotonic()
    with socket.create_connection(split_host_port(bootstrap), timeout=timeout) as sock:
        sock.sendall(encode_request(ApiKey.ApiVersions, 3, 1, "refused", client_software_name="t",
                                    client_software_version="1"))
        try:
            data = sock.recv(4)
        except ConnectionResetError:
            data = b""
    assert data == b"", f"kqp answered ({struct.unpack('>i', data)[0] if len(data) == 4 else data!r})"
    return time.monotonic() - started


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_kqp_logs_in_to_kafka(mechanism: str, kafka_cluster: KafkaCluster, kqp: Any) -> None:
    listener = kafka_cluster.listener("SASL_PLAINTEXT")
    proxy = kqp(listener, upstream=login(mechanism))
    served(proxy.bootstrap, listener)


def test_a_refused_login_is_named_and_no_client_waits(kafka_cluster: KafkaCluster, kqp: Any) -> None:
    listener = kafka_cluster.listener("SASL_PLAINTEXT")
    # At start: kqp waits for the upstream, saying why, and listens for nobody meanwhile.
    waiting = kqp(listener, upstream=login("SCRAM-SHA-512", password="not-the-password"), wait="none")
    line = waiting.wait_for_log("login as 'kqp' failed: error 58", timeout=15)
    assert "SCRAM-SHA-512" in line and "not-the-password" not in waiting.logs()
    assert not accepts(*split_host_port(waiting.bootstrap)), "kqp listens before it could log in"
    assert waiting.stop() == 0

    # While running: a user whose password changes on Kafka after kqp logged in with it.
    user, first, second = unique_topic("rotating"), "first-password", "second-password"
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})

    def set_password(password: str) -> None:
        upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                              password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(15)

    set_password(first)
    proxy, metrics = start_with_metrics(kqp, listener, quotas={}, upstream=login("SCRAM-SHA-256", user, first))
    produce("confluent-kafka", proxy.bootstrap, unique_topic("rotating"), 5, {})
    set_password(second)
    deadline = time.monotonic() + 15
    while True:   # the new credential reaches the broker through the metadata log
        try:
            took = closed_unanswered(proxy.bootstrap)
            break
        except AssertionError:
            assert time.monotonic() < deadline, "kqp kept logging in with the old password"
            time.sleep(0.3)
    assert took < 5, f"a refused login kept the client waiting {took:.1f}s"
    assert (sample(scrape(metrics), "kqp_connections_closed_total", reason="upstream_auth_failed") or 0) >= 1
    refusal = proxy.wait_for_log(f"SASL/SCRAM-SHA-256 login as '{user}' failed: error 58")
    assert "on bootstrap" in refusal and first not in proxy.logs() and second not in proxy.logs()


def test_kqp_verifies_kafkas_certificate_and_presents_its_own(kafka_cluster: KafkaCluster, kafka_certs: TlsFiles,
                                                            kqp: Any, tmp_path: Path) -> None:
    ca = str(kafka_certs.ca_path)
    one_way = kafka_cluster.listener("SSL")
    served(kqp(one_way, upstream={"tls": {"ca": ca}}).bootstrap, one_way)

    mutual = kafka_cluster.listener("MTLS")
    mine = kafka_certs.client("kqp-upstream")
    served(kqp(mutual, upstream={"tls": {"ca": ca, "cert": str(mine.cert), "key": str(mine.key)}}).bootstrap, mutual)

    # Refused, and said why: no certificate where Kafka requires one; a CA that did not sign Kafka's.
    refusals = {"no client certificate": (mutual, ca), "untrusted broker": (one_way, str(TlsFiles(tmp_path).ca_path))}
    # TLS 1.3 sends the missing certificate's alert after the handshake, and a read may meet the
    # broker's close first (a reset): kqp logs every retry, and a retry's line names the certificate.
    expected = {"no client certificate": "CERTIFICATE", "untrusted broker": "CERTIFICATE_VERIFY_FAILED"}
    said = {}
    for case, (listener, trusted) in refusals.items():
        refused = kqp(listener, upstream={"tls": {"ca": trusted}}, wait="none")
        said[case] = refused.wait_for_log(expected[case], timeout=15)
        assert refused.stop() == 0
        assert "waiting for the upstream" in said[case], said


def refused_in(bootstrap: str, settings: dict[str, Any], timeout: float = 15.0) -> tuple[str, float]:
    """(Kafka's authentication error as the client reports it, seconds it took)."""
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": errors.append, "log_level": 0, **settings})
    started = time.monotonic()
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() - started < timeout, f"no authentication error within {timeout}s: {errors}"
        producer.poll(0.1)
    return next(e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION), time.monotonic() - started


PASSTHROUGH = [("confluent-kafka", "SCRAM-SHA-512"), ("kafka-python", "SCRAM-SHA-256"), ("aiokafka", "PLAIN")]


@pytest.mark.parametrize(("client", "mechanism"), PASSTHROUGH, ids=[f"{c}-{m}" for c, m in PASSTHROUGH])
def test_a_clients_login_passes_through_to_kafka(client: str, mechanism: str, kafka_cluster: KafkaCluster,
                                                 kqp: Any) -> None:
    listener = kafka_cluster.listener("SASL_PLAINTEXT")
    quotas = {"entities": [{"user": "alice", "producer_byte_rate": 50_000_000}]}
    proxy, metrics = start_with_metrics(kqp, listener, quotas=quotas, sasl={"mode": "passthrough"},
                                        upstream=login("SCRAM-SHA-256"))
    client_id = f"passthrough-{client}"
    produce(client, proxy.bootstrap, unique_topic("passthrough"), 20,
            sasl_settings(client, mechanism, "alice", KAFKA_USERS["alice"]), client_id=client_id)
    samples = scrape(metrics)
    # Charged to alice, under alice's quota: the user Kafka accepted, not ANONYMOUS.
    assert sample(samples, "kqp_quota_limit", quota="producer_byte_rate", user="alice", client_id=client_id) \
        == 50_000_000
    assert (sample(samples, "kqp_requests_total", api="Produce", user="alice", client_id=client_id) or 0) > 0
    assert not sample(samples, "kqp_requests_total", api="Produce", user="ANONYMOUS", client_id=client_id)
    if client != "confluent-kafka":
        return
    said, took = refused_in(proxy.bootstrap, sasl_settings(client, mechanism, "alice", "wrong"))
    assert "invalid credentials" in said and took < 10, (said, took)
    # The client reports the refusal as it reads it; kqp counts the close that follows a moment later.
    assert sample_reaching(metrics, "kqp_connections_closed_total", 1, reason="authentication_failed") >= 1
    assert "the upstream refused SASL/SCRAM-SHA-512 login as 'alice'" in proxy.wait_for_log("refused SASL")
