"""The SASL frames (SaslHandshake, SaslAuthenticate) and the first tokens of the mechanisms kqp reads.

Two users: the connection core answers these frames itself when it terminates SASL, and reads the
client's first token when SASL passes through to the upstream (to learn whom the upstream is about
to authenticate). Frames go through kafka-python's message classes (Apache Kafka's schemas); the
tokens are the mechanisms' own formats: PLAIN (RFC 4616), SCRAM's client-first message (RFC 5802)
and OAUTHBEARER's (RFC 7628, a JWT as KIP-255 sends it).

Nothing here logs or keeps a token: PLAIN's carries the password, OAUTHBEARER's a bearer token.
"""

from __future__ import annotations

from dataclasses import dataclass

import jwt
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from .apis import ApiKey
from .errors import ProtocolError
from .headers import response_body_offset
from .messages import decode_body, response_frame

__all__ = [
    "ILLEGAL_SASL_STATE",
    "SASL_AUTHENTICATION_FAILED",
    "UNSUPPORTED_SASL_MECHANISM",
    "PlainToken",
    "claimed_name",
    "decode_authenticate_request",
    "decode_authenticate_response",
    "decode_handshake_request",
    "encode_authenticate_response",
    "encode_handshake_response",
    "oauthbearer_first",
    "parse_plain",
    "scram_username",
]

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58




def decode_handshake_request(version: int, body: memoryview) -> str:
    """The mechanism a SaslHandshake request names."""
    return str(decode_body(SaslHandshakeRequest, version, body).mechanism)  # type: ignore[attr-defined]


def decode_authenticate_request(version: int, body: memoryview) -> bytes:
    """The SASL token a SaslAuthenticate request carries."""
    return bytes(decode_body(SaslAuthenticateRequest, version, body).auth_bytes)  # type: ignore[attr-defined]


def decode_authenticate_response(version: int, frame: memoryview) -> tuple[int, bytes]:
    """A whole SaslAuthenticate response frame's error code and server token."""
    offset = response_body_offset(ApiKey.SaslAuthenticate, version, frame)
    response = decode_body(SaslAuthenticateResponse, version, frame[offset:])
    return int(response.error_code), bytes(response.auth_bytes or b"")  # type: ignore[attr-defined]


def encode_handshake_response(version: int, correlation_id: int, error_code: int,
                              mechanisms: tuple[str, ...]) -> bytes:
    """A whole SaslHandshake response frame: the enabled mechanisms, whatever the outcome (Kafka
    lists them with UNSUPPORTED_SASL_MECHANISM so a client can say what it could have chosen)."""
    body = SaslHandshakeResponse(error_code=error_code, mechanisms=list(mechanisms)).encode(version=version)
    return response_frame(ApiKey.SaslHandshake, version, correlation_id, bytes(body))


def encode_authenticate_response(version: int, correlation_id: int, error_code: int = 0,
                                 error_message: str | None = None, auth_bytes: bytes = b"",
                                 session_lifetime_ms: int = 0) -> bytes:
    """A whole SaslAuthenticate response frame; session_lifetime_ms (v1+): when the client must log in
    again on the connection (KIP-368), 0 for never."""
    body = SaslAuthenticateResponse(error_code=error_code, error_message=error_message, auth_bytes=auth_bytes,
                                    session_lifetime_ms=session_lifetime_ms).encode(version=version)
    return response_frame(ApiKey.SaslAuthenticate, version, correlation_id, bytes(body))


@dataclass(frozen=True, slots=True)
class PlainToken:
    """RFC 4616's message: ``[authzid] NUL authcid NUL passwd``."""

    authzid: str
    authcid: str
    password: str = ""

    def __repr__(self) -> str:   # the password never shows
        return f"PlainToken(authzid={self.authzid!r}, authcid={self.authcid!r})"


def parse_plain(token: bytes) -> PlainToken:
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise ProtocolError("SASL/PLAIN: the message is not authzid NUL authcid NUL passwd")
    try:
        authzid, authcid, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise ProtocolError("SASL/PLAIN: the message is not UTF-8") from None
    if not authcid:
        raise ProtocolError("SASL/PLAIN: empty authentication identity")
    return PlainToken(authzid, authcid, password)


def scram_username(client_first: bytes) -> str:
    """The ``n=`` of a SCRAM client-first message (``gs2-header n=saslname,r=nonce[,...]``), with
    RFC 5802's ``=2C`` and ``=3D`` decoded."""
    try:
        text = client_first.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("SASL/SCRAM: the client-first message is not UTF-8") from None
    fields = text.split(",")
    # gs2-header: cbind flag, [authzid]; then the bare message whose first attribute is n=.
    if len(fields) < 4 or not fields[2].startswith("n="):
        raise ProtocolError("SASL/SCRAM: the client-first message has no n= attribute")
    name = fields[2][2:].replace("=2C", ",").replace("=3D", "=")
    if not name:
        raise ProtocolError("SASL/SCRAM: empty user name")
    return name


def oauthbearer_first(client_first: bytes) -> tuple[str, str]:
    """RFC 7628's client-first message, ``gs2-header %x01 key=value %x01 ... %x01 %x01`` with
    ``auth=Bearer <token>`` among the pairs (KIP-255): the authorization id the gs2 header names
    (``n,a=alice,``; empty when none) and the token."""
    header, _, pairs = client_first.partition(b"\x01")
    fields = header.decode("utf-8", "replace").split(",")
    authzid = next((f[2:] for f in fields[1:2] if f.startswith("a=")), "")
    for pair in pairs.split(b"\x01"):
        if pair[:5].lower() == b"auth=":
            scheme, _, token = pair[5:].decode("ascii", "replace").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return authzid.replace("=2C", ",").replace("=3D", "="), token.strip()
    raise ProtocolError("SASL/OAUTHBEARER: the client's message has no auth=Bearer token")


def _bearer_token(client_first: bytes) -> str:
    return oauthbearer_first(client_first)[1]


def claimed_name(mechanism: str, client_first: bytes, claim: str = "sub") -> str | None:
    """The user a client claims in its first token, as the upstream will name it once it verifies
    the token: PLAIN's authcid, SCRAM's ``n=``, OAUTHBEARER's ``claim`` of the JWT (read without
    verifying: the upstream verifies). None for a mechanism whose name kqp cannot read (GSSAPI: the
    principal travels inside a Kerberos ticket encrypted for the broker)."""
    upper = mechanism.upper()
    if upper == "PLAIN":
        return parse_plain(client_first).authcid
    if upper.startswith("SCRAM-"):
        return scram_username(client_first)
    if upper == "OAUTHBEARER":
        try:
            claims = jwt.decode(_bearer_token(client_first), options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise ProtocolError(f"SASL/OAUTHBEARER: the token is not a JWT ({type(exc).__name__})") from None
        value = claims.get(claim)
        return value if isinstance(value, str) and value else None
    return None
