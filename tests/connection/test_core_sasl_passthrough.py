"""Playbooks of SASL passed through (`sasl.mode: passthrough`): the frames go upstream unchanged, and
the name the client claims is adopted only once the upstream's SaslAuthenticate response says the
exchange succeeded. The upstream's answers are stated here as frames (the upstream verifies; kqp
only reads the error code and whether the exchange is complete)."""

from __future__ import annotations

import jwt
import pytest
from helpers.playbook import connected_core, play, produce_frame, to_client, to_upstream

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request
from kqp.protocol.sasl import encode_authenticate_response, encode_handshake_response
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.quotas.model import ANONYMOUS, Principal

NOW = 100.0


def core_for(**sasl: object) -> Connection:
    return connected_core(sasl={"mode": "passthrough", **sasl})


def handshake(correlation_id: int, mechanism: str) -> bytes:
    return encode_request(ApiKey.SaslHandshake, 1, correlation_id, "c", mechanism=mechanism)


def authenticate(correlation_id: int, token: bytes) -> bytes:
    return encode_request(ApiKey.SaslAuthenticate, 2, correlation_id, "c", auth_bytes=token)


def answered(correlation_id: int, error: int = 0, token: bytes = b"") -> bytes:
    return encode_authenticate_response(2, correlation_id, error, "failed" if error else None, token)


def handshaken(correlation_id: int, mechanism: str) -> bytes:
    return encode_handshake_response(1, correlation_id, 0, (mechanism,))


def log_in(core: Connection, first: int, mechanism: str, token: bytes, outcome: bytes) -> None:
    """One single-round exchange, frames forwarded both ways."""
    before = core.user
    play(core, [
        (ev.ClientData(NOW, handshake(first, mechanism)), [to_upstream(handshake(first, mechanism))]),
        (ev.UpstreamData(NOW, handshaken(first, mechanism)), [to_client(handshaken(first, mechanism))]),
        (ev.ClientData(NOW, authenticate(first + 1, token)), [to_upstream(authenticate(first + 1, token))]),
    ])
    assert core.user == before, "nothing is granted before the upstream's answer"
    play(core, [(ev.UpstreamData(NOW, outcome), [to_client(outcome)])])


def bearer(claims: dict[str, object]) -> bytes:
    token = jwt.encode(claims, key="upstream-signing-key", algorithm="HS256")   # kqp reads, never verifies
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_requests_before_authentication_go_upstream_as_anonymous() -> None:
    core = core_for()
    produce = produce_frame("t", 7, 1, "c")
    play(core, [(ev.ClientData(NOW, produce), [to_upstream(produce)])])   # the upstream enforces
    assert core.in_flight[-1].principal == Principal(ANONYMOUS, "c")


def test_the_claimed_name_is_adopted_after_the_upstreams_success() -> None:
    core = core_for()
    log_in(core, 1, "PLAIN", b"\x00alice\x00pw", answered(2))
    assert core.user == "alice" and core.auth.authenticated
    produce = produce_frame("t", 7, 3, "writer")
    play(core, [(ev.ClientData(NOW, produce), [to_upstream(produce)])])
    assert core.in_flight[-1].principal == Principal("alice", "writer")


def test_a_failed_authentication_keeps_anonymous() -> None:
    core = core_for()
    log_in(core, 1, "PLAIN", b"\x00alice\x00wrong", answered(2, error=58))
    assert core.user == ANONYMOUS and not core.auth.authenticated
    # The broker closes a refused login's connection: told as the refused login, not as upstream trouble.
    play(core, [(ev.UpstreamLost(NOW), [ev.Close("authentication_failed", "the upstream refused SASL/PLAIN login "
                                                 "as 'alice' (error 58); the upstream closed the connection")])])


@pytest.mark.parametrize("gone", [ev.ClientEof, ev.ClientLost])
def test_a_client_that_hangs_up_on_a_refused_login_failed_it(gone: type) -> None:
    """The client may hang up on the refusal before the broker closes (librdkafka does, at once)."""
    core = core_for()
    log_in(core, 1, "PLAIN", b"\x00alice\x00wrong", answered(2, error=58))
    play(core, [(gone(NOW), [ev.Close("authentication_failed", "the upstream refused SASL/PLAIN login as 'alice' "
                                      "(error 58); the client closed the connection")])])


@pytest.mark.parametrize("gone", [ev.ClientEof, ev.ClientLost])
def test_a_client_that_hangs_up_after_logging_in_closed_it(gone: type) -> None:
    core = core_for()
    log_in(core, 1, "PLAIN", b"\x00alice\x00pw", answered(2))
    play(core, [(gone(NOW), [ev.Close("client_closed", None)])])


def test_scram_is_adopted_at_the_server_final_message_only() -> None:
    core = core_for()
    first, final = b"n,,n=bo=2Cb,r=abc", b"c=biws,r=abcdef,p=proof"
    log_in(core, 1, "SCRAM-SHA-512", first, answered(2, token=b"r=abcdef,s=c2FsdA==,i=4096"))
    assert core.user == ANONYMOUS, "the server-first message is not a success"
    play(core, [
        (ev.ClientData(NOW, authenticate(3, final)), [to_upstream(authenticate(3, final))]),
        (ev.UpstreamData(NOW, answered(3, token=b"v=c2ln")), [to_client(answered(3, token=b"v=c2ln"))]),
    ])
    assert core.user == "bo,b"


def test_a_scram_exchange_refused_at_its_proof_grants_nothing() -> None:
    core = core_for()
    log_in(core, 1, "SCRAM-SHA-256", b"n,,n=bob,r=abc", answered(2, token=b"r=abcdef,s=c2FsdA==,i=4096"))
    final = b"c=biws,r=abcdef,p=bad"
    play(core, [
        (ev.ClientData(NOW, authenticate(3, final)), [to_upstream(authenticate(3, final))]),
        (ev.UpstreamData(NOW, answered(3, error=58)), [to_client(answered(3, error=58))]),
    ])
    assert core.user == ANONYMOUS


def test_reauthentication_may_change_the_principal() -> None:
    core = core_for()
    log_in(core, 1, "PLAIN", b"\x00alice\x00pw", answered(2))
    assert core.user == "alice"
    # KIP-368: a new handshake on the authenticated connection, OAUTHBEARER this time.
    log_in(core, 3, "OAUTHBEARER", bearer({"sub": "bob", "scope": "kafka"}), answered(4))
    assert core.user == "bob"
    produce = produce_frame("t", 7, 5, "writer")
    play(core, [(ev.ClientData(NOW, produce), [to_upstream(produce)])])
    assert core.in_flight[-1].principal == Principal("bob", "writer")


def test_a_failed_reauthentication_keeps_the_principal_it_had() -> None:
    core = core_for()
    log_in(core, 1, "PLAIN", b"\x00alice\x00pw", answered(2))
    log_in(core, 3, "PLAIN", b"\x00mallory\x00guess", answered(4, error=58))
    assert core.user == "alice"


def test_oauthbearer_with_a_configured_claim_and_its_error_challenge() -> None:
    core = core_for(principal_claim="preferred_username")
    challenge = b'{"status":"invalid_token"}'
    # RFC 7628: a refused token first comes back as an error challenge with error code 0.
    log_in(core, 1, "OAUTHBEARER", bearer({"sub": "x", "preferred_username": "carol"}), answered(2, token=challenge))
    assert core.user == ANONYMOUS
    core = core_for(principal_claim="preferred_username")
    log_in(core, 1, "OAUTHBEARER", bearer({"sub": "x", "preferred_username": "carol"}), answered(2))
    assert core.user == "carol"


def test_gssapi_passes_through_and_stays_anonymous() -> None:
    core = core_for()
    log_in(core, 1, "GSSAPI", b"\x60\x82kerberos-ap-req", answered(2))
    assert core.user == ANONYMOUS


def test_an_unreadable_first_token_grants_nothing_and_closes_nothing() -> None:
    core = core_for()
    log_in(core, 1, "OAUTHBEARER", b"n,,\x01auth=Bearer not-a-jwt\x01\x01", answered(2))
    assert core.user == ANONYMOUS and not core.closed
