"""kqp's own SASL login on a forwarding connection (`upstream.sasl`), run by the core in LOGGING_IN.

Playbooks as elsewhere (helpers.playbook): the upstream's side of the exchange is stated frame by
frame, or, for SCRAM, played by scramp's server with the credential kqp logs in with (as the
upstream double of the e2e tests does), so the core's frames are checked by a real server. The
client's request waits until the login is done, then goes; every way a login fails closes the
connection as `upstream_auth_failed`, with a message naming the upstream, the mechanism and the
user, never the password.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from helpers.playbook import (
    CONNECT_TIMEOUT_MS,
    Recorder,
    connected,
    connecting,
    make_core,
    play,
    produce_frame,
    produce_response,
    to_client,
    to_upstream,
)
from scramp import ScramMechanism

from kqp.protocol.apis import ApiKey
from kqp.protocol.headers import parse_request_header
from kqp.protocol.messages import encode_request
from kqp.protocol.sasl import decode_authenticate_request, encode_authenticate_response, encode_handshake_response
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import MuteReason
from kqp.proxy.connection.phases import Phase

NOW = 100.0
UPSTREAM = "127.0.0.1:9092"
DEADLINE = NOW + CONNECT_TIMEOUT_MS / 1000
SECRET = "kqp-secret"


def login_core(mechanism: str, observer: Recorder | None = None, **config: Any) -> Connection:
    """A core whose client is in and has sent a Produce, with kqp's login set to `mechanism`."""
    upstream = {"bootstrap_servers": UPSTREAM, "sasl": {"mechanism": mechanism, "username": "kqp", "password": SECRET}}
    core = make_core(observer=observer, upstream=upstream, **config)
    play(core, [connecting(NOW), (ev.ClientData(NOW, REQUEST), [])])
    return core


def handshake(mechanism: str) -> bytes:
    return encode_request(ApiKey.SaslHandshake, 1, 1, "kqp", mechanism=mechanism)


def authenticate(correlation_id: int, token: bytes) -> bytes:
    return encode_request(ApiKey.SaslAuthenticate, 1, correlation_id, "kqp", auth_bytes=token)


def handshake_ok(mechanism: str) -> bytes:
    return encode_handshake_response(1, 1, 0, (mechanism,))


REQUEST = produce_frame("t", 9, 1, "c")
LOGGED_IN = [ev.SetTimer(None), ev.Unmute(MuteReason.CONNECTING), to_upstream(REQUEST)]   # and the request goes
WHO = f"upstream {UPSTREAM}: SASL/PLAIN login as 'kqp' failed"


def test_plain_logs_in_then_the_client_s_request_goes() -> None:
    core = login_core("PLAIN")
    play(core, [
        (ev.UpstreamConnected(NOW, UPSTREAM), [to_upstream(handshake("PLAIN")), ev.SetTimer(DEADLINE)]),
        (ev.UpstreamData(NOW, handshake_ok("PLAIN")), [to_upstream(authenticate(2, b"\x00kqp\x00" + SECRET.encode()))]),
    ])
    assert core.phase is Phase.LOGGING_IN and core.muted(ev.Side.CLIENT)
    play(core, [
        (ev.UpstreamData(NOW + 0.1, encode_authenticate_response(1, 2)), LOGGED_IN),
        # The forwarding path is the core's own again: the response goes to the client.
        (ev.UpstreamData(NOW + 0.2, produce_response(9, 1)), [to_client(produce_response(9, 1))]),
    ])
    assert core.phase is Phase.OPEN


class ScramServer:
    """The upstream's side of SCRAM, on scramp's server, for user kqp with `password`."""

    def __init__(self, mechanism: str, password: str = SECRET) -> None:
        scram = ScramMechanism(mechanism)
        salt, stored, server, iterations = scram.make_auth_info(password, iteration_count=4096)
        self.server = scram.make_server(lambda user: (salt, stored, server, iterations))

    def answer(self, request: ev.Send, step: int, forge_signature: bool = False) -> bytes:
        frame = memoryview(b"".join(request.parts))
        hdr = parse_request_header(frame)
        token = decode_authenticate_request(1, frame[hdr.body_offset:]).decode()
        if step == 1:
            self.server.set_client_first(token)
            reply = self.server.get_server_first()
        else:
            self.server.set_client_final(token)
            reply = self.server.get_server_final()
            if forge_signature:   # a server that does not know the credential cannot sign this
                reply = "v=" + base64.b64encode(b"\x00" * 32).decode()
        return encode_authenticate_response(1, hdr.correlation_id, auth_bytes=reply.encode())


def scram_until_final(core: Connection, mechanism: str, server: ScramServer) -> ev.Send:
    """Run the exchange up to the client-final message, which is returned."""
    assert core.handle(ev.UpstreamConnected(NOW, UPSTREAM)) == [to_upstream(handshake(mechanism)),
                                                                ev.SetTimer(DEADLINE)]
    [client_first] = core.handle(ev.UpstreamData(NOW, handshake_ok(mechanism)))
    assert client_first.side is ev.Side.UPSTREAM
    [client_final] = core.handle(ev.UpstreamData(NOW, server.answer(client_first, 1)))
    assert client_final.side is ev.Side.UPSTREAM
    return client_final


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_logs_in_checking_the_server_s_signature(mechanism: str) -> None:
    core, server = login_core(mechanism), ScramServer(mechanism)
    client_final = scram_until_final(core, mechanism, server)
    play(core, [(ev.UpstreamData(NOW, server.answer(client_final, 2)), LOGGED_IN)])
    assert core.phase is Phase.OPEN


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_server_that_cannot_prove_it_knows_the_credential_is_refused(mechanism: str) -> None:
    core, server = login_core(mechanism, observer=(recorder := Recorder())), ScramServer(mechanism)
    client_final = scram_until_final(core, mechanism, server)
    who = f"upstream {UPSTREAM}: SASL/{mechanism} login as 'kqp' failed"
    play(core, [(ev.UpstreamData(NOW, server.answer(client_final, 2, forge_signature=True)), [
        ev.Close("upstream_auth_failed", f"{who}: ScramException in the server's SCRAM messages")])])
    assert recorder.closed == ["upstream_auth_failed"]


def test_a_mechanism_the_upstream_has_not_enabled_closes_naming_what_it_offers() -> None:
    core = login_core("PLAIN", observer=(recorder := Recorder()))
    core.handle(ev.UpstreamConnected(NOW, UPSTREAM))
    play(core, [(ev.UpstreamData(NOW, encode_handshake_response(1, 1, 33, ("SCRAM-SHA-512",))), [ev.Close(
        "upstream_auth_failed", f"{WHO}: mechanism not enabled (error 33; the upstream offers SCRAM-SHA-512)")])])
    assert recorder.closed == ["upstream_auth_failed"]


def test_bad_credentials_close_with_the_upstream_s_message_and_never_the_password() -> None:
    core = login_core("PLAIN")
    core.handle(ev.UpstreamConnected(NOW, UPSTREAM))
    core.handle(ev.UpstreamData(NOW, handshake_ok("PLAIN")))
    refused = encode_authenticate_response(1, 2, 58, "Authentication failed: Invalid username or password")
    [close] = core.handle(ev.UpstreamData(NOW, refused))
    assert close == ev.Close("upstream_auth_failed",
                             f"{WHO}: error 58 (Authentication failed: Invalid username or password)")
    assert SECRET not in (close.message or "")


def test_a_login_past_the_connect_timeout_closes() -> None:
    core = login_core("PLAIN")
    core.handle(ev.UpstreamConnected(NOW + 1, UPSTREAM))   # the upstream took 1 s: the login gets its own 10 s
    play(core, [
        (ev.TimerFired(NOW + 5), [ev.SetTimer(DEADLINE + 1)]),          # woken early: the rest of the wait
        (ev.TimerFired(DEADLINE + 1), [ev.Close("upstream_auth_failed",
                                                f"{WHO}: no answer within {CONNECT_TIMEOUT_MS} ms")]),
    ])


def test_an_upstream_that_closes_mid_login_closes_the_connection() -> None:
    core = login_core("PLAIN")
    core.handle(ev.UpstreamConnected(NOW, UPSTREAM))
    play(core, [(ev.UpstreamLost(NOW, "reset"), [ev.Close("upstream_auth_failed",
                                                          f"{WHO}: the upstream closed the connection: reset")])])


def test_an_answer_to_another_request_is_the_upstream_s_protocol_error() -> None:
    core = login_core("PLAIN")
    core.handle(ev.UpstreamConnected(NOW, UPSTREAM))
    play(core, [(ev.UpstreamData(NOW, encode_handshake_response(1, 7, 0, ("PLAIN",))), [ev.Close(
        "upstream_protocol_error",
        f"bad frame from upstream during kqp's login: {WHO[:-len(' failed')]}: the upstream answered correlation id "
        f"7, expected 1")])])


def test_a_client_that_closes_during_the_login_has_nothing_forwarded() -> None:
    """Issue 20 (giving_up.py): Kafka clients never half-close, so the client's EOF during kqp's
    login is a client that is gone: the request it sent meanwhile is dropped, not forwarded once kqp
    is logged in, and the connection closes at once, nothing being owed."""
    recorder = Recorder()
    core = login_core("PLAIN", observer=recorder)
    play(core, [
        (ev.UpstreamConnected(NOW, UPSTREAM), [to_upstream(handshake("PLAIN")), ev.SetTimer(DEADLINE)]),
        (ev.ClientEof(NOW), [ev.Mute(MuteReason.CLOSING), ev.Close("client_closed")]),
        (ev.UpstreamData(NOW, handshake_ok("PLAIN")), []),
    ])
    assert recorder.dropped == [1]


def test_an_upstream_that_never_connects_closes_at_the_connect_timeout() -> None:
    core = make_core()
    play(core, [
        connecting(NOW),
        (ev.TimerFired(DEADLINE), [ev.Close("upstream_unreachable", f"no upstream connection within "
                                                                   f"{CONNECT_TIMEOUT_MS} ms")]),
    ])


def test_in_passthrough_the_forwarding_connection_carries_the_client_s_own_login() -> None:
    # upstream.sasl is for kqp's control connections only: the client's SASL frames go upstream here.
    upstream = {"bootstrap_servers": UPSTREAM, "sasl": {"mechanism": "PLAIN", "username": "kqp", "password": SECRET}}
    core = make_core(upstream=upstream, sasl={"mode": "passthrough"})
    play(core, [connecting(NOW), connected(NOW)])
    assert core.phase is Phase.OPEN
