"""The smallest SASL-speaking upstream: a test double that authenticates, then relays to a real broker.

Neither test upstream can verify a SASL login kqp passes through: librdkafka's mock cluster speaks
no SASL, and Tansu's `--authentication` (tansu 0.6) offers SCRAM only with users made by
`tansu user create`, which needs an unauthenticated broker, while memory storage lives and dies
with one broker process; so an authenticating memory broker has no users at all. This double sits
in front of a real broker (Tansu, advertising the double's port) and is a SASL listener as Kafka
has one: ApiVersions is answered before authentication (the broker's ranges plus SaslHandshake v0-1
and SaslAuthenticate v0-2), SaslHandshake and SaslAuthenticate are served here (PLAIN per RFC 4616,
SCRAM-SHA-256/512 on scramp's server, KIP-368 re-authentication allowed to change the principal),
anything else before a login closes the connection, and after a login every frame is relayed to
the broker unchanged (ApiVersions answers get the SASL ranges added).

It logs every login outcome (`logins`: connection, mechanism, user, ok) so a test can tell what the
upstream decided. Threads, one pair per connection; everything on 127.0.0.1.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism

from kqp.protocol.api_versions import decode_api_versions_response, encode_api_versions_response
from kqp.protocol.apis import ApiKey
from kqp.protocol.headers import parse_request_header
from kqp.protocol.sasl import (
    decode_authenticate_request,
    decode_handshake_request,
    encode_authenticate_response,
    encode_handshake_response,
    parse_plain,
)

from .upstream_double import UpstreamDouble, read_frame

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_RANGES = {ApiKey.SaslHandshake: (0, 1), ApiKey.SaslAuthenticate: (0, 2)}


@dataclass(frozen=True)
class Login:
    connection: int
    mechanism: str
    user: str
    ok: bool




class SaslDouble(UpstreamDouble):
    name = "sasl-double"

    def __init__(self, backend: tuple[str, int], users: dict[str, str]) -> None:
        self.backend = backend
        self.users = users
        self.logins: list[Login] = []
        self._lock = threading.Lock()
        super().__init__()

    def logins_of(self, user: str) -> list[Login]:
        with self._lock:
            return [login for login in self.logins if login.user == user]

    # -- one connection ------------------------------------------------------------------------
    def serve(self, client: socket.socket, connection: int) -> None:
        client.settimeout(30)
        backend = socket.create_connection(self.backend, timeout=30)
        versions: dict[int, int] = {}   # correlation id -> ApiVersions version, for answers to patch
        authenticated = False
        pump: threading.Thread | None = None
        mechanism: str | None = None
        scram = None
        try:
            while (frame := read_frame(client)) is not None:
                hdr = parse_request_header(memoryview(frame))
                body = memoryview(frame)[hdr.body_offset:]
                if hdr.api_key == ApiKey.SaslHandshake:
                    mechanism = decode_handshake_request(hdr.api_version, body)
                    code = 0 if mechanism in MECHANISMS else 33
                    client.sendall(encode_handshake_response(hdr.api_version, hdr.correlation_id, code, MECHANISMS))
                    scram = None
                    if code:
                        return
                    continue
                if hdr.api_key == ApiKey.SaslAuthenticate:
                    token = decode_authenticate_request(hdr.api_version, body)
                    answer, claimed, ok, done, scram = self._step(mechanism or "", token, scram)
                    if done:
                        with self._lock:
                            self.logins.append(Login(connection, mechanism or "", claimed, ok))
                    if done and not ok:
                        client.sendall(encode_authenticate_response(hdr.api_version, hdr.correlation_id, 58,
                                                                    "Authentication failed"))
                        return
                    client.sendall(encode_authenticate_response(hdr.api_version, hdr.correlation_id,
                                                                auth_bytes=answer))
                    authenticated = authenticated or ok
                    continue
                if hdr.api_key == ApiKey.ApiVersions:
                    versions[hdr.correlation_id] = hdr.api_version
                elif not authenticated:
                    return   # as Kafka: nothing but ApiVersions and SASL before a login
                if pump is None:
                    pump = threading.Thread(target=self._pump, args=(backend, client, versions), daemon=True)
                    pump.start()
                backend.sendall(frame)
        finally:
            for sock in (client, backend):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def _pump(self, backend: socket.socket, client: socket.socket, versions: dict[int, int]) -> None:
        """Broker -> client, whole frames; ApiVersions answers get the SASL ranges."""
        while (frame := read_frame(backend)) is not None:
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            version = versions.pop(correlation_id, None)
            if version is not None:
                error, ranges = decode_api_versions_response(memoryview(frame), version)
                frame = encode_api_versions_response(version, correlation_id, {**ranges, **SASL_RANGES}, error)
            try:
                client.sendall(frame)
            except OSError:
                return

    def _step(self, mechanism: str, token: bytes, scram: object) -> tuple[bytes, str, bool, bool, object]:
        """(server token, the claimed user, proven, exchange finished, SCRAM state)."""
        if mechanism == "PLAIN":
            plain = parse_plain(token)
            return b"", plain.authcid, self.users.get(plain.authcid) == plain.password, True, None
        if scram is None:
            users, claimed = self.users, ["?"]

            def credential(user: str) -> tuple[bytes, bytes, bytes, int] | None:
                claimed[0] = user
                password = users.get(user)
                return None if password is None else ScramMechanism(mechanism).make_auth_info(password, 4096)

            server = ScramMechanism(mechanism).make_server(credential)
            try:
                server.set_client_first(token.decode())
                return server.get_server_first().encode(), claimed[0], False, False, (server, claimed[0])
            except ScramException:
                return b"", claimed[0], False, True, None
        server, user = scram   # type: ignore[misc]
        try:
            server.set_client_final(token.decode())
            return server.get_server_final().encode(), user, True, True, None
        except ScramException:
            return b"", user, False, True, None
