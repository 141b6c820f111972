"""OAUTHBEARER tokens checked by kqp, as Kafka's broker checks them (its ValidatorAccessTokenValidator).

A token is a JWS-signed JWT (RFC 7515, 7519): its header's key id (`kid`) picks a verification key
from the JWKS kqp holds (`keys`, refreshed by the runtime: `kqp.proxy.runtime.jwks`); an unknown
key id asks for an early refresh (`expedite`) and refuses this login, as Kafka's
RefreshingHttpsJwksVerificationKeyResolver does. PyJWT (with `cryptography`) checks the signature
with an asymmetric algorithm (never `none` nor a shared secret); then, against the injected wall
clock (the core reads none): `exp` and `iat` present, `exp` not past and `nbf` not ahead beyond
`clock_skew_seconds`, `iss` the configured issuer, `aud` naming one of the audiences, and the
principal claim (`sub` by default) a non-empty string. `Token.expires_at` bounds the session
(KIP-368). A refusal's `reason` is for kqp's log: it names the check, never the token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import jwt

__all__ = ["InvalidToken", "Token", "TokenValidator"]

#: The JWS algorithms a token may be signed with: public-key ones only (a JWKS holds public keys).
ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})


class InvalidToken(Exception):
    """A token kqp refuses; the message says which check failed (kqp's log only: clients get
    RFC 7628's `invalid_token`)."""


class Token(NamedTuple):
    principal: str
    expires_at: float   # wall-clock seconds (the `exp` claim)


@dataclass(frozen=True)
class TokenValidator:
    keys: Callable[[], Mapping[str, Any]]    # key id -> a PyJWK (the JWKS in force)
    expedite: Callable[[str], None]           # ask the runtime to fetch the JWKS again for this key id
    wall: Callable[[], float]                 # wall-clock seconds (the claims are epoch seconds)
    issuer: str | None = None
    audience: tuple[str, ...] = ()
    clock_skew_seconds: float = 30.0
    principal_claim: str = "sub"

    def validate(self, token: str) -> Token:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"not a JWS ({type(exc).__name__})") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise InvalidToken(f"algorithm {algorithm!r} is not a public-key one")
        key = self._key(header.get("kid"))
        try:
            claims = jwt.decode(token, key.key, algorithms=[algorithm],
                                options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                                         "verify_aud": False, "verify_iss": False})
        except jwt.InvalidSignatureError:
            raise InvalidToken("the signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"the token does not verify ({type(exc).__name__})") from None
        return self._checked(claims)

    def _key(self, kid: object) -> Any:
        keys = self.keys()
        if isinstance(kid, str) and kid in keys:
            return keys[kid]
        if kid is None and ("" in keys or len(keys) == 1):   # a key without an id, a token naming none
            return keys.get("") or next(iter(keys.values()))
        if isinstance(kid, str):
            self.expedite(kid)
        raise InvalidToken(f"no key with id {kid!r} in the JWKS ({len(keys)} key(s))")

    def _checked(self, claims: Mapping[str, Any]) -> Token:
        now, skew = self.wall(), self.clock_skew_seconds
        exp, iat, nbf = claims.get("exp"), claims.get("iat"), claims.get("nbf")
        for name, value in (("exp", exp), ("iat", iat)):
            if not _number(value):
                raise InvalidToken(f"no numeric {name} claim")
        if exp + skew <= now:
            raise InvalidToken(f"expired {now - exp:.0f}s ago")
        if nbf is not None and (not _number(nbf) or nbf - skew > now):
            raise InvalidToken("not valid yet (nbf)")
        if self.issuer is not None and claims.get("iss") != self.issuer:
            raise InvalidToken("issuer is not the one expected")
        if self.audience:
            aud = claims.get("aud")
            named = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not any(a in self.audience for a in named):
                raise InvalidToken("audience names none of those expected")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"no {self.principal_claim} claim naming the principal")
        return Token(principal.strip(), float(exp))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
