"""OAUTHBEARER terminated at kqp in front of Apache Kafka 4.4, with Kafka's Java client.

The test's identity provider (helpers.token_issuer) serves a JWKS and a token endpoint; kqp checks
tokens against the JWKS URL (fetched off the loop at start), the Java client fetches its token from
the endpoint (client credentials) and logs in to kqp with it: it produces as the principal its
token's `sub` names, which has an ACL and a quota of its own in kqp's config. Tokens with a wrong
signature, issuer or audience, or an expired one, are refused with Kafka's own error (the
`invalid_token` status, SASL_AUTHENTICATION_FAILED), by the Java client and by kafka-python sending
the token as is; with a 2 s session (`max_reauth_ms`) the Java client re-authenticates on the same
connections (KIP-368) and produces on for 10 s. No token appears in kqp's log or metrics.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import java_clients
from helpers.names import unique_topic
from helpers.observability import sample, scrape, start_with_metrics
from helpers.token_issuer import AUDIENCE, ISSUER, TokenIssuer

pytestmark = pytest.mark.e2e

TOPIC = unique_topic("oauth")
SERVICE = "svc-orders"


@pytest.fixture(scope="module")
def issuer() -> Iterator[TokenIssuer]:
    with TokenIssuer() as running:
        yield running


@pytest.fixture(scope="module")
def upstream(kafka: str) -> str:
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(30)
    return kafka


def start(kqp: Any, upstream: str, issuer: TokenIssuer, **sasl: Any) -> tuple[Any, str]:
    return start_with_metrics(
        kqp, upstream, quotas={"entities": [{"user": SERVICE, "producer_byte_rate": 2_000_000}]},
        sasl={"mode": "terminate", "oauthbearer": {"jwks_url": f"{issuer.url}/jwks.json", "issuer": ISSUER,
                                                   "audience": [AUDIENCE]}, **sasl},
        authorization={"acls": [{"principal": f"User:{SERVICE}", "operation": "Write", "resource_type": "Topic",
                                 "resource_name": TOPIC}]})


def java_produce(bootstrap: str, issuer: TokenIssuer, client_id: str, seconds: float = 5,
                 max_records: int | None = 20) -> dict[str, Any]:
    return java_clients.produce(bootstrap, TOPIC, f"{client_id}-java", seconds, max_records=max_records,
                                record_bytes=100, conf={**issuer.java_settings(client_id), "max.block.ms": 15000,
                                                        "delivery.timeout.ms": 20000, "request.timeout.ms": 10000},
                                jvm_options=issuer.java_options())


def test_the_java_client_logs_in_with_a_signed_token_and_gets_its_principals_acl_and_quota(
        kqp: Any, upstream: str, issuer: TokenIssuer) -> None:
    proxy, metrics = start(kqp, upstream, issuer)
    run = java_produce(proxy.bootstrap, issuer, SERVICE)
    assert (run["acked"], run["errors"]) == (20, [])
    samples = scrape(metrics)
    assert (sample(samples, "kqp_requests_total", api="Produce", user=SERVICE, client_id=f"{SERVICE}-java")
            or 0) > 0
    assert sample(samples, "kqp_quota_limit", user=SERVICE, client_id=f"{SERVICE}-java",
                  quota="producer_byte_rate") == 2_000_000
    assert issuer.served["/jwks.json"] >= 1
    with urllib.request.urlopen(f"{metrics}/metrics", timeout=10) as response:
        exposed = response.read().decode()
    assert "eyJ" not in proxy.logs() + exposed, "a JWT (base64 of '{\"') reached the log or the metrics"


@pytest.mark.parametrize("bad", ["wrong-signature", "wrong-issuer", "wrong-audience", "expired"])
def test_a_token_kafka_would_refuse_is_refused(bad: str, kqp: Any, upstream: str, issuer: TokenIssuer) -> None:
    proxy, _ = start(kqp, upstream, issuer)
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return issuer.token(bad)

    with pytest.raises(KafkaError):
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider(),
                                 max_block_ms=5000)
        producer.send(TOPIC, b"never").get(timeout=10)
    reasons = {"wrong-signature": "the signature does not verify", "wrong-issuer": "issuer is not the one expected",
               "wrong-audience": "audience names none of those expected", "expired": "expired"}
    proxy.wait_for_log(f"SASL/OAUTHBEARER: {reasons[bad]}", timeout=10)
    assert "eyJ" not in proxy.logs(), "a JWT (base64 of '{\"') reached the log"
    if bad != "expired":   # the Java client refuses an expired token itself, before it reaches kqp
        run = java_produce(proxy.bootstrap, issuer, bad, max_records=1)
        assert run["acked"] == 0 and any("SaslAuthenticationException" in e for e in run["errors"]), run
        assert any('{"status":"invalid_token"}' in e for e in run["errors"]), run


def test_with_a_short_session_the_java_client_re_authenticates_and_produces_on(
        kqp: Any, upstream: str, issuer: TokenIssuer) -> None:
    proxy, metrics = start(kqp, upstream, issuer, max_reauth_ms=2000)
    run = java_produce(proxy.bootstrap, issuer, SERVICE, seconds=10, max_records=None)
    assert run["errors"] == [] and run["failed"] == 0 and run["acked"] > 50, run
    logins = sample(scrape(metrics), "kqp_requests_total", api="SaslAuthenticate", user=SERVICE,
                    client_id=f"{SERVICE}-java") or 0
    assert logins >= 4, f"{logins} logins in 10 s of 2 s sessions: the client did not re-authenticate"
    assert "session_expired" not in proxy.logs()
