"""OAUTHBEARER terminated at kqp (RFC 7628, KIP-255) and KIP-368's sessions: the token checks as pure
code on an injected wall clock, and the exchange as playbooks on a connected core.

Keys are made with `cryptography`, tokens signed with PyJWT. The checks are those of Kafka's
ValidatorAccessTokenValidator (signature by a key of the JWKS picked by `kid`, `exp` and `iat`
required, `nbf`, issuer, audience, the principal claim; 30 s of clock skew), and the exchange is
Kafka's OAuthBearerSaslServer's: a refused token gets the `{"status":"invalid_token"}` challenge
with no error, the client answers %x01, then comes SASL_AUTHENTICATION_FAILED with that status as
its message, and the connection closes. A session lasts until the token expires (or
`max_reauth_ms`), told in session_lifetime_ms; a request after it closes the connection
unless the client logs in again first.
"""

from __future__ import annotations

import itertools
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from helpers.playbook import connected_core, produce_frame
from kafka.protocol.sasl import SaslAuthenticateResponse

from kqp.protocol.apis import ApiKey
from kqp.protocol.headers import response_body_offset
from kqp.protocol.messages import decode_body, encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.oauthbearer import InvalidToken, TokenValidator

NOW = 100.0          # loop time
WALL = 1_800_000_000.0   # wall-clock seconds the tokens are judged at
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KEYS = {"rsa-1": jwt.PyJWK(jwt.algorithms.RSAAlgorithm.to_jwk(RSA_KEY.public_key(), as_dict=True)),
        "ec-1": jwt.PyJWK(jwt.algorithms.ECAlgorithm.to_jwk(EC_KEY.public_key(), as_dict=True), "ES256")}
GOOD = {"sub": "alice", "iss": "https://idp", "aud": ["kafka", "other"], "iat": WALL - 10, "exp": WALL + 600}
_ids = itertools.count(1)


def token(claims: dict[str, Any] | None = None, key: Any = RSA_KEY, kid: str | None = "rsa-1",
          algorithm: str = "RS256", **changes: Any) -> str:
    body = {**GOOD, **(claims or {}), **changes}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=algorithm,
                      headers=None if kid is None else {"kid": kid})


def validator(asked: list[str] | None = None, **kw: Any) -> TokenValidator:
    return TokenValidator(lambda: KEYS, (asked if asked is not None else []).append, lambda: WALL,
                          kw.pop("issuer", "https://idp"), kw.pop("audience", ("kafka",)), **kw)


def test_a_good_token_names_its_principal_and_expiry() -> None:
    assert validator().validate(token()) == ("alice", WALL + 600)
    assert validator().validate(token(key=EC_KEY, kid="ec-1", algorithm="ES256")).principal == "alice"
    assert validator(principal_claim="client_id").validate(token(client_id="svc-7")).principal == "svc-7"


@pytest.mark.parametrize(("made", "reason"), [
    (lambda: token(key=OTHER_KEY), "the signature does not verify"),
    (lambda: token(exp=WALL - 31), "expired 31s ago"),
    (lambda: token(nbf=WALL + 31), "not valid yet (nbf)"),
    (lambda: token(iss="https://evil"), "issuer is not the one expected"),
    (lambda: token(aud="billing"), "audience names none of those expected"),
    (lambda: token(exp=None), "no numeric exp claim"),
    (lambda: token(iat=None), "no numeric iat claim"),
    (lambda: token(sub=""), "no sub claim naming the principal"),
    (lambda: jwt.encode(GOOD, "a-shared-secret-of-32-bytes-xxxx", algorithm="HS256", headers={"kid": "rsa-1"}),
     "algorithm 'HS256' is not a public-key one"),
    (lambda: "not.a.jwt", "not a JWS"),
])
def test_a_token_kafka_would_refuse_is_refused_saying_which_check(made: Any, reason: str) -> None:
    with pytest.raises(InvalidToken, match=reason.replace("(", r"\(").replace(")", r"\)")):
        validator().validate(made())


def test_the_clock_skew_forgives_30_seconds_either_way() -> None:
    assert validator().validate(token(exp=WALL - 29, nbf=WALL + 29)).principal == "alice"


def test_an_unknown_key_id_asks_for_the_jwks_again_and_refuses_this_login() -> None:
    asked: list[str] = []
    with pytest.raises(InvalidToken, match="no key with id 'rotated-2'"):
        validator(asked).validate(token(kid="rotated-2"))
    assert asked == ["rotated-2"]


# -- the exchange on the core ------------------------------------------------------------------------

SASL = {"mode": "terminate", "mechanisms": ["OAUTHBEARER"], "oauthbearer": {"jwks_url": "https://idp/jwks"}}


def oauth_core(max_reauth_ms: int | None = None) -> Connection:
    sasl = {**SASL, **({} if max_reauth_ms is None else {"max_reauth_ms": max_reauth_ms})}
    return connected_core(sasl=sasl, tokens=validator(), authorization={"enabled": False})


def frame(api: int, version: int, **fields: Any) -> tuple[int, bytes]:
    correlation_id = next(_ids)
    return correlation_id, encode_request(api, version, correlation_id, "c", **fields)


def login(core: Connection, bearer: bytes, now: float = NOW, version: int = 2) -> tuple[Any, list[ev.Action]]:
    """A SaslAuthenticate carrying `bearer` (the client's message); kqp's answer decoded, and the actions."""
    _, request = frame(ApiKey.SaslAuthenticate, version, auth_bytes=bearer)
    actions = core.handle(ev.ClientData(now, request))
    sends = [b"".join(a.parts) for a in actions if isinstance(a, ev.Send) and a.side is ev.Side.CLIENT]
    view = memoryview(sends[0])
    offset = response_body_offset(ApiKey.SaslAuthenticate, version, view)
    return decode_body(SaslAuthenticateResponse, version, view[offset:]), actions


def first_message(bearer: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {bearer}\x01\x01".encode()


def handshake(core: Connection, now: float = NOW) -> None:
    core.handle(ev.ClientData(now, frame(ApiKey.SaslHandshake, 1, mechanism="OAUTHBEARER")[1]))


def test_a_login_succeeds_with_the_tokens_lifetime_as_the_session() -> None:
    core = oauth_core()
    handshake(core)
    answer, _ = login(core, first_message(token(exp=WALL + 90)))
    assert (answer.error_code, answer.auth_bytes, answer.session_lifetime_ms) == (0, b"", 90_000)
    assert core.user == "alice" and core.auth.session_end == NOW + 90


def test_max_reauth_ms_shortens_the_session() -> None:
    core = oauth_core(max_reauth_ms=5000)
    handshake(core)
    assert login(core, first_message(token()))[0].session_lifetime_ms == 5000


def test_a_refused_token_gets_the_challenge_then_the_error_then_the_close() -> None:
    core = oauth_core()
    handshake(core)
    challenge, actions = login(core, first_message(token(iss="https://evil")))
    assert (challenge.error_code, challenge.auth_bytes) == (0, b'{"status":"invalid_token"}')
    assert not any(isinstance(a, ev.Close) for a in actions) and core.user == "ANONYMOUS"
    failure, actions = login(core, b"\x01")
    assert (failure.error_code, failure.error_message) == (58, '{"status":"invalid_token"}')
    assert actions[-1] == ev.Close("authentication_failed", "SASL/OAUTHBEARER: issuer is not the one expected")


def test_an_authorization_id_other_than_the_tokens_principal_is_refused() -> None:
    core = oauth_core()
    handshake(core)
    answer, actions = login(core, first_message(token(), authzid="root"))
    assert answer.error_code == 58 and "different from the token's principal name (alice)" in answer.error_message
    assert actions[-1].reason == "authentication_failed"


def test_a_request_after_the_session_expired_closes_unless_the_client_logs_in_again() -> None:
    core = oauth_core(max_reauth_ms=10_000)
    handshake(core)
    login(core, first_message(token()))
    produce = produce_frame("t", 9, 900, "c", acks=0)   # acks=0: nothing awaited before the next login
    assert any(isinstance(a, ev.Send) for a in core.handle(ev.ClientData(NOW + 9, produce)))
    handshake(core, NOW + 11)   # KIP-368: re-authentication is served after the expiry too
    answer, _ = login(core, first_message(token()), now=NOW + 11)
    assert answer.error_code == 0 and core.auth.session_end == NOW + 21
    late = oauth_core(max_reauth_ms=10_000)
    handshake(late)
    login(late, first_message(token()))
    actions = late.handle(ev.ClientData(NOW + 10.5, produce))
    assert actions[-1].reason == "session_expired" and "did not re-authenticate" in actions[-1].message


def test_re_authentication_may_not_change_the_principal() -> None:
    core = oauth_core()
    handshake(core)
    login(core, first_message(token()))
    handshake(core)
    answer, actions = login(core, first_message(token(sub="mallory")))
    assert answer.error_code == 58 and "Cannot change principals" in answer.error_message
    assert actions[-1].reason == "authentication_failed"
