"""SASL terminated by kqp (`sasl.mode: terminate`): who may log in, and the server side of the exchange.

`SaslPolicy` is built once from the config (`sasl.mechanisms`, `sasl.users` or `users_file`, the
OAUTHBEARER token validator): PLAIN passwords and SCRAM credentials (salted, as Kafka keeps them).
`Authenticator` is one connection's server: SaslHandshake then SaslAuthenticate, PLAIN in one
round, SCRAM-SHA-256/512 in two on scramp's server, OAUTHBEARER in one (a refused token in two, as
Kafka's OAuthBearerSaslServer: the `{"status":"invalid_token"}` challenge, the client's %x01, then
the error); each frame gives a `Verdict`: kqp's answer, the user the connection now belongs to and
how long its session lasts (KIP-368: `connections.max.reauth.ms`, a token's expiry), or why it
closes once the answer is out. Errors and messages are Kafka's own; a failed login never names the
secret. Re-authentication keeps the principal.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from scramp import ScramException, ScramMechanism

from kqp.config.model import OAUTHBEARER, SCRAM_MECHANISMS, SaslConfig, ScramCredential, UserSecret
from kqp.protocol.apis import ApiKey, kqp_ranges
from kqp.protocol.errors import ProtocolError
from kqp.protocol.sasl import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    decode_authenticate_request,
    decode_handshake_request,
    encode_authenticate_response,
    encode_handshake_response,
    oauthbearer_first,
    parse_plain,
)

from .oauthbearer import InvalidToken, TokenValidator

__all__ = ["Authenticator", "SaslPolicy", "Verdict"]

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DERIVED_ITERATIONS = 4096
PLAIN_FAILED = "Authentication failed: Invalid username or password"
INVALID_TOKEN = '{"status":"invalid_token"}'   # RFC 7628's error, as Kafka's server writes it
KQP_RANGES = kqp_ranges()


def _nonce() -> str:
    return secrets.token_urlsafe(18)


@dataclass(frozen=True)
class SaslPolicy:
    """What the core needs to authenticate clients; built from `SaslConfig` where the server is assembled."""

    mode: str = "none"                                   # none | terminate | passthrough
    mechanisms: tuple[str, ...] = ()                     # terminate: offered, in this order
    users: Mapping[str, UserSecret] = field(default_factory=dict, repr=False)
    principal_claim: str = "sub"                         # passthrough: OAUTHBEARER's principal claim
    nonce: Callable[[], str] = _nonce                    # SCRAM server nonce
    tokens: TokenValidator | None = None                 # terminate: OAUTHBEARER's checks
    max_reauth_ms: int | None = None                     # Kafka's connections.max.reauth.ms
    _derived: dict[tuple[str, str], ScramCredential] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_config(cls, sasl: SaslConfig, nonce: Callable[[], str] = _nonce,
                    tokens: TokenValidator | None = None) -> SaslPolicy:
        return cls(sasl.mode, sasl.mechanisms, sasl.credentials, sasl.principal_claim, nonce, tokens,
                   sasl.max_reauth_ms)

    def session_ms(self, expires_in_ms: float | None = None) -> int:
        """A session's lifetime as KIP-368 tells it (0: none): `max_reauth_ms`, shortened to a
        credential's own expiry (a token's), as Kafka's SaslServerAuthenticator computes it."""
        limits = [x for x in (self.max_reauth_ms, expires_in_ms) if x is not None]
        return max(1, int(min(limits))) if limits else 0

    def advertised(self, ranges: Mapping[int, tuple[int, int]]) -> Mapping[int, tuple[int, int]]:
        """What kqp's ApiVersions answer lists: when kqp terminates SASL, its own SASL versions,
        whatever the upstream speaks (a sidecar's upstream may speak no SASL at all)."""
        if self.mode != "terminate":
            return ranges
        return {**ranges, **{api: KQP_RANGES[api] for api in (ApiKey.SaslHandshake, ApiKey.SaslAuthenticate)}}

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        secret = self.users.get(user)
        if secret is None:
            return None
        stored = secret.scram.get(mechanism)
        if stored is not None or secret.password is None:
            return stored
        derived = self._derived.get((user, mechanism))
        if derived is None:
            salt, stored_key, server_key, iterations = ScramMechanism(mechanism).make_auth_info(
                secret.password, iteration_count=DERIVED_ITERATIONS)
            derived = self._derived[(user, mechanism)] = ScramCredential(salt, iterations, stored_key, server_key)
        return derived

    def plain_ok(self, user: str, password: str) -> bool:
        secret = self.users.get(user)
        if secret is None:
            return False
        given = password.encode("utf-8")
        if secret.password is not None:
            return hmac.compare_digest(secret.password.encode("utf-8"), given)
        if not secret.scram:
            return False
        # Only SCRAM credentials: RFC 5802's StoredKey = H(HMAC(SaltedPassword, "Client Key")) of the given password.
        mechanism, cred = next(iter(secret.scram.items()))
        name = HASHES[mechanism]
        salted = hashlib.pbkdf2_hmac(name, given, cred.salt, cred.iterations)
        client_key = hmac.digest(salted, b"Client Key", name)
        return hmac.compare_digest(hashlib.new(name, client_key).digest(), cred.stored_key)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one SASL frame comes to: kqp's `answer`, then (when `user` is set) the connection belongs
    to `user`, or (when `failure` is set) the connection closes once the answer is out."""

    answer: bytes
    user: str | None = None
    failure: str | None = None    # the logged reason; never a secret
    session_ms: int = 0           # with `user`: the session's lifetime (0: it does not expire)


class State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    SCRAM_FINAL = "scram_final"
    DONE = "done"


class Authenticator:
    """The server side of one connection's SASL exchange."""

    def __init__(self, policy: SaslPolicy) -> None:
        self.policy = policy
        self.state = State.HANDSHAKE
        self.mechanism: str | None = None
        self.user: str | None = None          # the authenticated principal, once DONE
        self._claimant: str | None = None     # the user a SCRAM exchange is about (not yet proven)
        self._scram = None
        self._refused_token: str | None = None   # OAUTHBEARER: why the token was refused, until the client's %x01

    def on_frame(self, authenticate: bool, version: int, correlation_id: int, body: memoryview) -> Verdict:
        """A SaslAuthenticate frame (`authenticate`) or a SaslHandshake."""
        if not authenticate:
            return self._handshake(version, correlation_id, decode_handshake_request(version, body))
        token = decode_authenticate_request(version, body)
        return self._authenticate(version, correlation_id, token)

    # -- SaslHandshake -------------------------------------------------------------------------
    def _handshake(self, version: int, correlation_id: int, mechanism: str) -> Verdict:
        offered = self.policy.mechanisms
        if self.state not in (State.HANDSHAKE, State.DONE):
            return Verdict(encode_handshake_response(version, correlation_id, ILLEGAL_SASL_STATE, offered),
                           failure=f"SaslHandshake in the middle of a {self.mechanism} exchange")
        if mechanism not in offered:
            return Verdict(encode_handshake_response(version, correlation_id, UNSUPPORTED_SASL_MECHANISM, offered),
                           failure=f"SASL mechanism {mechanism!r} is not enabled (enabled: {', '.join(offered)})")
        self.mechanism, self.state = mechanism, State.AUTHENTICATE
        return Verdict(encode_handshake_response(version, correlation_id, 0, offered))

    # -- SaslAuthenticate ----------------------------------------------------------------------
    def _authenticate(self, version: int, correlation_id: int, token: bytes) -> Verdict:
        def fail(message: str, reason: str, code: int = SASL_AUTHENTICATION_FAILED) -> Verdict:
            self.state = State.HANDSHAKE
            return Verdict(encode_authenticate_response(version, correlation_id, code, message), failure=reason)

        def succeed(user: str, auth_bytes: bytes = b"", expires_in_ms: float | None = None) -> Verdict:
            if self.user is not None and user != self.user:   # KIP-368: re-authentication keeps the principal
                return fail(f"Cannot change principals during re-authentication from {self.user} to {user}",
                            f"re-authentication as {user!r} on a connection of {self.user!r}")
            self.state, self.user = State.DONE, user
            session_ms = self.policy.session_ms(expires_in_ms)
            return Verdict(encode_authenticate_response(version, correlation_id, auth_bytes=auth_bytes,
                                                        session_lifetime_ms=session_ms), user=user,
                           session_ms=session_ms)

        mechanism = self.mechanism
        if self.state is State.AUTHENTICATE and mechanism == OAUTHBEARER:
            return self._oauthbearer(version, correlation_id, token, fail, succeed)
        if self.state is State.AUTHENTICATE and mechanism == "PLAIN":
            try:
                plain = parse_plain(token)
            except ProtocolError as exc:
                return fail(PLAIN_FAILED, f"SASL/PLAIN: {exc}")
            if plain.authzid and plain.authzid != plain.authcid:
                return fail("Authentication failed: Client requested an authorization id that is different "
                            "from username", f"SASL/PLAIN: {plain.authcid!r} asked to act as {plain.authzid!r}")
            if not self.policy.plain_ok(plain.authcid, plain.password):
                return fail(PLAIN_FAILED, f"SASL/PLAIN authentication of {plain.authcid!r} failed")
            return succeed(plain.authcid)
        if self.state is State.AUTHENTICATE and mechanism in SCRAM_MECHANISMS:
            return self._scram_first(version, correlation_id, token, fail)
        if self.state is State.SCRAM_FINAL and self._scram is not None:
            try:
                self._scram.set_client_final(token.decode("utf-8"))
                final = self._scram.get_server_final()
            except (ScramException, UnicodeDecodeError):
                return fail(_scram_failed(mechanism), f"SASL/{mechanism} authentication of {self._claimant!r} "
                                                      f"failed: invalid proof")
            finally:
                self._scram = None
            assert self._claimant is not None
            return succeed(self._claimant, final.encode("utf-8"))
        return fail("Unexpected SaslAuthenticate request: no SaslHandshake before it",
                    "SaslAuthenticate before a SaslHandshake", ILLEGAL_SASL_STATE)

    def _oauthbearer(self, version: int, correlation_id: int, token: bytes, fail: Callable[..., Verdict],
                     succeed: Callable[..., Verdict]) -> Verdict:
        """RFC 7628 as Kafka's OAuthBearerSaslServer: a good token logs in; a refused one gets the
        `invalid_token` challenge, and the client's %x01 after it the error, which closes the connection."""
        refused, self._refused_token = self._refused_token, None
        if token == b"\x01" and refused is not None:
            return fail(INVALID_TOKEN, f"SASL/OAUTHBEARER: {refused}")
        tokens = self.policy.tokens
        try:
            authzid, bearer = oauthbearer_first(token)
            if tokens is None:
                raise InvalidToken("kqp has no token validator")
            checked = tokens.validate(bearer)
        except (ProtocolError, InvalidToken) as exc:
            self._refused_token = str(exc)
            return Verdict(encode_authenticate_response(version, correlation_id, auth_bytes=INVALID_TOKEN.encode()))
        if authzid and authzid != checked.principal:
            return fail(f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                        f"from the token's principal name ({checked.principal})",
                        f"SASL/OAUTHBEARER: {checked.principal!r} asked to act as {authzid!r}")
        return succeed(checked.principal, expires_in_ms=(checked.expires_at - tokens.wall()) * 1000)

    def _scram_first(self, version: int, correlation_id: int, token: bytes,
                     fail: Callable[[str, str], Verdict]) -> Verdict:
        mechanism = self.mechanism
        assert mechanism is not None
        policy = self.policy

        def credential(user: str) -> tuple[bytes, bytes, bytes, int] | None:   # None: no such user
            self._claimant = user
            cred = policy.scram_credential(user, mechanism)
            return None if cred is None else (cred.salt, cred.stored_key, cred.server_key, cred.iterations)

        self._claimant = None
        server = ScramMechanism(mechanism).make_server(credential, s_nonce=policy.nonce())
        try:
            server.set_client_first(token.decode("utf-8"))
            first = server.get_server_first()
        except (ScramException, UnicodeDecodeError):
            if self._claimant is not None and policy.scram_credential(self._claimant, mechanism) is None:
                return fail(_scram_failed(mechanism), f"SASL/{mechanism}: unknown user {self._claimant!r}")
            return fail(_scram_failed(mechanism), f"SASL/{mechanism}: a client-first message kqp cannot accept")
        self._scram, self.state = server, State.SCRAM_FINAL
        return Verdict(encode_authenticate_response(version, correlation_id, auth_bytes=first.encode("utf-8")))


def _scram_failed(mechanism: str | None) -> str:
    # Kafka's own wording, which clients show their users.
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
