"""SASL terminated at kqp, with real clients: every client logs in with every mechanism it speaks,
its traffic counts as its user, and a wrong password is refused with the error the client expects.

The upstream is librdkafka's mock cluster, which speaks no SASL at all: kqp is the sidecar that
brings authentication to a cluster without it. One user's quota holds across every client id and
mechanism that user logs in with at once (the rate the upstream received, from a wire tap).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.observability import sample, scrape, start_with_metrics
from helpers.quota_analysis import cumulative_slope, request_events
from helpers.quota_clients import confluent_flood, kafka_python_flood
from helpers.quota_path import open_quota_path, quota_upstream
from helpers.sasl_clients import CLIENTS_MECHANISMS, LoginRefused, kcat_scram_broken, produce, sasl_settings

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
SASL = {"mode": "terminate", "users": USERS}
# Terminated SASL turns kqp's authorization on; these tests are about who the user is, so everyone may
# (the authorization path still runs: test_kafka_authorization.py holds it to a broker's answers).
EVERYONE = {"allow_everyone_if_no_acl_found": True}
CASES = [(client, mechanism) for client, mechanisms in CLIENTS_MECHANISMS.items() for mechanism in mechanisms]


def skip_broken_client(client: str, mechanism: str) -> None:
    if client == "kcat" and mechanism.startswith("SCRAM") and kcat_scram_broken():
        pytest.xfail("kcat's librdkafka 2.0 repeats its nonce in SCRAM's client-final message, which every "
                     "RFC 5802 server refuses (kqp says 'invalid proof'; Kafka says 'Invalid client nonce')")



@pytest.mark.parametrize(("client", "mechanism"), CASES, ids=[f"{c}-{m}" for c, m in CASES])
def test_login_and_produce_as_the_user(client: str, mechanism: str, kqp: Any, mock_cluster: str) -> None:
    skip_broken_client(client, mechanism)
    process, metrics = start_with_metrics(kqp, mock_cluster, quotas={}, sasl=SASL, authorization=EVERYONE)
    client_id = f"{client}-{mechanism}".lower()
    produce(client, process.bootstrap, unique_topic("sasl"), 20, sasl_settings(client, mechanism, "bob", "bob-secret"),
            client_id=client_id)
    samples = scrape(metrics)
    assert (sample(samples, "kqp_requests_total", api="Produce", user="bob", client_id=client_id) or 0) > 0, \
        f"{client} over {mechanism}: no Produce request counted as user bob"
    assert not [key for key in samples if ("user", "ANONYMOUS") in key[1] and ("client_id", client_id) in key[1]
                and key[0] == "kqp_requests_total" and ("api", "Produce") in key[1]]


@pytest.mark.parametrize(("client", "mechanism"), CASES, ids=[f"{c}-{m}" for c, m in CASES])
def test_a_wrong_password_is_refused_as_the_client_expects(client: str, mechanism: str, kqp: Any,
                                                          mock_cluster: str) -> None:
    process, metrics = start_with_metrics(kqp, mock_cluster, quotas={}, sasl=SASL, authorization=EVERYONE)
    with pytest.raises(LoginRefused) as refused:
        produce(client, process.bootstrap, unique_topic("sasl"), 1, sasl_settings(client, mechanism, "bob", "guess"))
    assert "Authentication failed" in str(refused.value) or "SaslAuthenticationFailed" in repr(refused.value), \
        f"{client}: {refused.value}"
    assert "guess" not in process.logs()
    samples = scrape(metrics)
    assert (sample(samples, "kqp_connections_closed_total", reason="authentication_failed") or 0) >= 1
    assert not [key for key in samples if ("user", "bob") in key[1]], "a failed claimant was counted as bob"


QUOTA = 100_000                  # alice's producer_byte_rate, bytes/s, shared by all her clients
FAST_WINDOWS = {"window_size_seconds": 0.2, "window_count": 11}
OFFER_SECONDS = 12.0
RATE_TOLERANCE = 0.05         # the fidelity matrix's goal (tests/e2e/test_fidelity_matrix.py): a user is a scope too


def test_a_users_quota_holds_across_its_clients_and_mechanisms(kqp: Any, tmp_path: Any) -> None:
    # Three producers log in as alice at once, each with its own client id and mechanism; /users/alice
    # is one budget for all of them, so the upstream receives the quota in total, not three times it.
    quotas = {**FAST_WINDOWS, "entities": [{"user": "alice", "producer_byte_rate": QUOTA}]}
    login = sasl_settings("confluent-kafka", "PLAIN", "alice", "alice-secret")
    with quota_upstream(tmp_path) as upstream, contextlib.ExitStack() as stack:
        path = open_quota_path(stack, kqp, upstream, quotas, probe_conf=login, sasl=SASL,
                                authorization=EVERYONE)
        topic = unique_topic("sasl-quota")
        floods = {
            "alice-plain": lambda: confluent_flood(path.bootstrap, topic, "alice-plain", OFFER_SECONDS, **login),
            "alice-scram256": lambda: confluent_flood(
                path.bootstrap, topic, "alice-scram256", OFFER_SECONDS,
                **sasl_settings("confluent-kafka", "SCRAM-SHA-256", "alice", "alice-secret")),
            "alice-scram512": lambda: kafka_python_flood(
                path.bootstrap, topic, "alice-scram512", OFFER_SECONDS,
                **sasl_settings("kafka-python", "SCRAM-SHA-512", "alice", "alice-secret")),
        }
        runs: dict[str, Any] = {}
        threads = [threading.Thread(target=lambda c=c, f=f: runs.__setitem__(c, f())) for c, f in floods.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(OFFER_SECONDS + 60)
        assert set(runs) == set(floods), "a producer thread did not finish"
        events = sorted(event for client_id in floods for event in request_events(
            path.upstream_tap.requests(client_id=client_id, api_key=ApiKey.Produce)))
        for client_id in floods:
            assert any(r.client_id == client_id for r in path.upstream_tap.requests(api_key=ApiKey.Produce)), \
                f"{client_id}: nothing reached the upstream"
        span = FAST_WINDOWS["window_size_seconds"] * FAST_WINDOWS["window_count"]
        start, end = events[0][0] + span, min(run.offered_until for run in runs.values())
        rate = cumulative_slope(events, start, end)
        assert abs(rate - QUOTA) <= RATE_TOLERANCE * QUOTA, \
            f"alice's three clients together: upstream received {rate / 1000:.1f} KB/s, quota {QUOTA / 1000:.0f} KB/s"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kqps_own_login_against_a_kqp_that_terminates_sasl(mechanism: str, kqp: Any, mock_cluster: str) -> None:
    # kqp in front of kqp: the inner one terminates SASL, the outer one (clients without SASL) logs in
    # to it with upstream.sasl on every connection it opens, so its clients count as user "edge".
    inner, metrics = start_with_metrics(kqp, mock_cluster, quotas={},
                                        sasl={"mode": "terminate", "users": {"edge": "edge-secret"}},
                                        authorization=EVERYONE)
    outer = kqp(inner.bootstrap, {}, upstream={"sasl": {"mechanism": mechanism, "username": "edge",
                                                        "password": "edge-secret"}})
    produce("confluent-kafka", outer.bootstrap, unique_topic("kqp-kqp"), 10, {}, client_id="behind-two")
    assert (sample(scrape(metrics), "kqp_requests_total", api="Produce", user="edge", client_id="behind-two")
            or 0) > 0
    assert "edge-secret" not in outer.logs() + inner.logs()
