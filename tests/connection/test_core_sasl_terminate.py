"""Playbooks of SASL terminated at kqp (`sasl.mode: terminate`): kqp answers SaslHandshake and
SaslAuthenticate itself, in the in-flight FIFO like ApiVersions, never forwarding them.

No sockets: each step is an event and the exact actions it must produce (helpers.playbook). The
SCRAM exchange is stated byte for byte: the server nonce is fixed by the playbook, the client side
is scramp's client with a fixed nonce, and the server signature is computed here from RFC 5802.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field

from helpers.playbook import SERVER_NONCE, Recorder, connected_core, play, produce_frame, to_client, to_upstream
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse
from scramp import ScramClient, ScramMechanism

from kqp.protocol.api_versions import encode_api_versions_response
from kqp.protocol.apis import ApiKey, kqp_ranges
from kqp.protocol.messages import encode_request
from kqp.protocol.sasl import encode_authenticate_response, encode_handshake_response
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import MuteReason
from kqp.quotas.model import ANONYMOUS, Principal

NOW = 100.0
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SALT = b"kqp-test-salt-16"
# alice has SCRAM-SHA-256 credentials only (kqp never sees her password); bob has a password.
ALICE_PASSWORD = "alice-secret"
_SALT, ALICE_STORED, ALICE_SERVER, _I = ScramMechanism("SCRAM-SHA-256").make_auth_info(ALICE_PASSWORD, 4096, SALT)
B64 = base64.b64encode


def b64(data: bytes) -> str:
    return B64(data).decode()


SASL = {"mode": "terminate", "users": {
    "alice": {"SCRAM-SHA-256": {"salt": b64(SALT), "iterations": 4096, "stored_key": b64(ALICE_STORED),
                                "server_key": b64(ALICE_SERVER)}},
    "bob": "bob-secret"}}


@dataclass
class Principals(Recorder):
    """Every principal a hook was called with: who the traffic was counted as."""

    seen: set[Principal] = field(default_factory=set)

    def request(self, principal: Principal, api_key: int, nbytes: int) -> None:
        self.seen.add(principal)

    def response(self, principal: Principal, api_key: int, nbytes: int, upstream_seconds: float) -> None:
        self.seen.add(principal)

    def handler_time(self, principal: Principal, seconds: float) -> None:
        self.seen.add(principal)


def core_for(observer: Recorder | None = None, **sasl: object) -> Connection:
    # Authorization is on with terminate by default: these are SASL's playbooks (its own are
    # test_core_authorization.py's), as kqp runs with `authorization: {enabled: false}`.
    return connected_core(observer=observer, sasl={**SASL, **sasl}, authorization={"enabled": False})


def handshake(correlation_id: int, mechanism: str, client_id: str = "c") -> bytes:
    return encode_request(ApiKey.SaslHandshake, 1, correlation_id, client_id, mechanism=mechanism)


def authenticate(correlation_id: int, token: bytes, version: int = 2, client_id: str = "c") -> bytes:
    return encode_request(ApiKey.SaslAuthenticate, version, correlation_id, client_id, auth_bytes=token)


def handshake_ok(correlation_id: int) -> ev.Send:
    return to_client(encode_handshake_response(1, correlation_id, 0, MECHANISMS))


def auth_ok(correlation_id: int, token: bytes = b"", version: int = 2) -> ev.Send:
    return to_client(encode_authenticate_response(version, correlation_id, auth_bytes=token))


PLAIN_FAILED = "Authentication failed: Invalid username or password"


def test_kqps_answers_decode_as_kafkas_schemas_say() -> None:
    body = encode_handshake_response(1, 7, 33, MECHANISMS)[8:]
    assert SaslHandshakeResponse.decode(body, version=1).mechanisms == list(MECHANISMS)
    for version in (0, 1, 2):
        frame = encode_authenticate_response(version, 7, 58, PLAIN_FAILED)
        response = SaslAuthenticateResponse.decode(frame[8 + (version >= 2):], version=version)
        assert (response.error_code, response.error_message) == (58, PLAIN_FAILED)


def test_plain_login_then_the_traffic_counts_as_the_user() -> None:
    observer = Principals()
    core = core_for(observer)
    produce = produce_frame("t", 7, 4, "writer")
    play(core, [
        # ApiVersions before authentication is answered (and exempt from request quotas).
        (ev.ClientData(NOW, encode_request(ApiKey.ApiVersions, 2, 1, "c")),
         [to_client(encode_api_versions_response(2, 1, kqp_ranges()))]),
        (ev.ClientData(NOW, handshake(2, "PLAIN")), [handshake_ok(2)]),
        (ev.ClientData(NOW, authenticate(3, b"\x00bob\x00bob-secret", version=1)), [auth_ok(3, version=1)]),
        (ev.ClientData(NOW, produce), [to_upstream(produce)]),
    ])
    assert core.user == "bob" and core.auth.authenticated
    assert core.in_flight[-1].principal == Principal("bob", "writer")


def test_plain_with_a_wrong_password_is_refused_then_closed() -> None:
    observer = Principals()
    core = core_for(observer)
    play(core, [
        (ev.ClientData(NOW, handshake(1, "PLAIN")), [handshake_ok(1)]),
        (ev.ClientData(NOW, authenticate(2, b"\x00bob\x00guess")), [
            ev.Mute(MuteReason.CLOSING),
            to_client(encode_authenticate_response(2, 2, 58, PLAIN_FAILED)),
            ev.Close("authentication_failed", "SASL/PLAIN authentication of 'bob' failed"),
        ]),
    ])
    assert core.user == ANONYMOUS and observer.closed == ["authentication_failed"]
    assert all(p.user == ANONYMOUS for p in observer.seen), "a failed claimant is never counted as that user"


def test_plain_against_scram_credentials_checks_the_stored_key() -> None:
    # alice has only SCRAM credentials: PLAIN verifies her password against the stored key.
    play(core_for(), [
        (ev.ClientData(NOW, handshake(1, "PLAIN")), [handshake_ok(1)]),
        (ev.ClientData(NOW, authenticate(2, f"\x00alice\x00{ALICE_PASSWORD}".encode())), [auth_ok(2)]),
    ])
    play(core := core_for(), [(ev.ClientData(NOW, handshake(1, "PLAIN")), [handshake_ok(1)])])
    actions = core.handle(ev.ClientData(NOW, authenticate(2, b"\x00alice\x00wrong")))
    assert actions[-1] == ev.Close("authentication_failed", "SASL/PLAIN authentication of 'alice' failed")


def scram_exchange(password: str) -> tuple[ScramClient, bytes, bytes, bytes, bytes]:
    """alice's SCRAM-SHA-256 messages as the RFC has them: (client, client-first, server-first,
    client-final, server-final)."""
    client = ScramClient(["SCRAM-SHA-256"], "alice", password, c_nonce="client-nonce")
    client_first = client.get_client_first()                       # n,,n=alice,r=client-nonce
    server_first = f"r=client-nonce{SERVER_NONCE},s={b64(SALT)},i=4096"
    client.set_server_first(server_first)
    client_final = client.get_client_final()                       # c=biws,r=...,p=proof
    without_proof = client_final[:client_final.index(",p=")]
    auth_message = f"{client_first[3:]},{server_first},{without_proof}".encode()
    signature = hmac.digest(ALICE_SERVER, auth_message, hashlib.sha256)   # ServerSignature
    return client, client_first.encode(), server_first.encode(), client_final.encode(), b"v=" + B64(signature)


def test_scram_full_exchange_against_stored_credentials() -> None:
    observer = Principals()
    core = core_for(observer)
    client, first, server_first, final, server_final = scram_exchange(ALICE_PASSWORD)
    play(core, [
        (ev.ClientData(NOW, handshake(1, "SCRAM-SHA-256", client_id="")), [handshake_ok(1)]),
        (ev.ClientData(NOW, authenticate(2, first, client_id="")), [auth_ok(2, server_first)]),
    ])
    assert core.user == ANONYMOUS, "the first message only claims a name"
    play(core, [(ev.ClientData(NOW, authenticate(3, final, client_id="")), [auth_ok(3, server_final)])])
    client.set_server_final(server_final.decode())   # the client verifies kqp's signature
    assert core.user == "alice"


def test_scram_with_a_bad_proof_is_refused_and_the_claimant_not_counted() -> None:
    observer = Principals()
    core = core_for(observer)
    _, first, server_first, final, _ = scram_exchange("not-alices-password")
    failed = ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
              "SCRAM-SHA-256")
    play(core, [
        (ev.ClientData(NOW, handshake(1, "SCRAM-SHA-256")), [handshake_ok(1)]),
        (ev.ClientData(NOW, authenticate(2, first)), [auth_ok(2, server_first)]),
        (ev.ClientData(NOW, authenticate(3, final)), [
            ev.Mute(MuteReason.CLOSING), to_client(encode_authenticate_response(2, 3, 58, failed)),
            ev.Close("authentication_failed", "SASL/SCRAM-SHA-256 authentication of 'alice' failed: invalid proof"),
        ]),
    ])
    assert core.user == ANONYMOUS
    assert all(p.user == ANONYMOUS for p in observer.seen)


def test_scram_sha_512_from_a_plain_password() -> None:
    # bob has a password only: kqp derives his SCRAM credential (random salt), so drive the client.
    core = core_for()
    client = ScramClient(["SCRAM-SHA-512"], "bob", "bob-secret")
    play(core, [(ev.ClientData(NOW, handshake(1, "SCRAM-SHA-512")), [handshake_ok(1)])])
    [send] = core.handle(ev.ClientData(NOW, authenticate(2, client.get_client_first().encode())))
    server_first = SaslAuthenticateResponse.decode(b"".join(send.parts)[9:], version=2).auth_bytes
    client.set_server_first(server_first.decode())
    [send] = core.handle(ev.ClientData(NOW, authenticate(3, client.get_client_final().encode())))
    client.set_server_final(SaslAuthenticateResponse.decode(b"".join(send.parts)[9:], version=2).auth_bytes.decode())
    assert core.user == "bob"


def test_unknown_scram_user_is_refused_at_the_first_message() -> None:
    core = core_for()
    client = ScramClient(["SCRAM-SHA-256"], "mallory", "x", c_nonce="n")
    play(core, [(ev.ClientData(NOW, handshake(1, "SCRAM-SHA-256")), [handshake_ok(1)])])
    actions = core.handle(ev.ClientData(NOW, authenticate(2, client.get_client_first().encode())))
    assert actions[-1] == ev.Close("authentication_failed", "SASL/SCRAM-SHA-256: unknown user 'mallory'")


def test_an_unknown_mechanism_gets_the_enabled_ones_then_the_connection_closes() -> None:
    core = core_for(mechanisms=["SCRAM-SHA-512", "PLAIN"])
    play(core, [
        (ev.ClientData(NOW, handshake(1, "GSSAPI")), [
            ev.Mute(MuteReason.CLOSING),
            to_client(encode_handshake_response(1, 1, 33, ("SCRAM-SHA-512", "PLAIN"))),
            ev.Close("authentication_failed", "SASL mechanism 'GSSAPI' is not enabled (enabled: SCRAM-SHA-512, PLAIN)"),
        ]),
    ])


def test_a_request_before_authentication_closes_the_connection_unanswered() -> None:
    core = core_for()
    play(core, [
        (ev.ClientData(NOW, produce_frame("t", 7, 1, "c")),
         [ev.Close("authentication_required", "Produce request before SASL authentication")]),
    ])
    play(core := core_for(), [
        (ev.ClientData(NOW, handshake(1, "PLAIN")), [handshake_ok(1)]),
        (ev.ClientData(NOW, encode_request(ApiKey.Metadata, 1, 2, "c", topics=None)),
         [ev.Close("authentication_required", "Metadata request before SASL authentication")]),
    ])


def test_authenticate_before_a_handshake_is_an_illegal_state() -> None:
    core = core_for()
    actions = core.handle(ev.ClientData(NOW, authenticate(1, b"\x00bob\x00bob-secret")))
    assert actions[1] == to_client(encode_authenticate_response(
        2, 1, 34, "Unexpected SaslAuthenticate request: no SaslHandshake before it"))
    assert actions[-1] == ev.Close("authentication_failed", "SaslAuthenticate before a SaslHandshake")


def test_pipelined_answers_keep_their_order_in_the_fifo() -> None:
    core = core_for()
    versions = encode_request(ApiKey.ApiVersions, 2, 1, "c")
    play(core, [(ev.ClientData(NOW, versions + handshake(2, "PLAIN") + authenticate(3, b"\x00bob\x00bob-secret")),
                 [to_client(encode_api_versions_response(2, 1, kqp_ranges())), handshake_ok(2), auth_ok(3)])])


def test_reauthentication_keeps_the_principal_as_kafka_does() -> None:
    core = core_for()
    play(core, [
        (ev.ClientData(NOW, handshake(1, "PLAIN")), [handshake_ok(1)]),
        (ev.ClientData(NOW, authenticate(2, b"\x00bob\x00bob-secret")), [auth_ok(2)]),
        (ev.ClientData(NOW, handshake(3, "PLAIN")), [handshake_ok(3)]),
        (ev.ClientData(NOW, authenticate(4, b"\x00bob\x00bob-secret")), [auth_ok(4)]),
        (ev.ClientData(NOW, handshake(5, "PLAIN")), [handshake_ok(5)]),
    ])
    actions = core.handle(ev.ClientData(NOW, authenticate(6, f"\x00alice\x00{ALICE_PASSWORD}".encode())))
    assert actions[-1] == ev.Close("authentication_failed", "re-authentication as 'alice' on a connection of 'bob'")
    assert core.user == "bob"


def test_a_v0_handshake_is_refused_though_advertised_for_librdkafka() -> None:
    # librdkafka looks for SaslHandshake v0 in ApiVersions before it offers SASL at all, then sends v1.
    assert kqp_ranges()[ApiKey.SaslHandshake] == (0, 1)
    for mode in ("terminate", "passthrough", "none"):
        core = connected_core(sasl={**SASL, "mode": mode} if mode == "terminate" else {"mode": mode})
        play(core, [(ev.ClientData(NOW, encode_request(ApiKey.SaslHandshake, 0, 1, "c", mechanism="PLAIN")), [
            ev.Close("authentication_required",
                     "SaslHandshake v0 (unframed SASL tokens) is not supported; clients since Kafka 1.0 send v1")])])
