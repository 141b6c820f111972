"""Who a connection's user is: the one place the core asks, whatever `sasl.mode` says.

`Authentication` holds the connection's user (a TLS client's mapped certificate subject, or the name
SASL establishes, else ANONYMOUS), its host, and the principals its client ids make. The core hands
it the SASL frames a plan names (`route`, which says what becomes of each: a `Route`) and the
upstream's SaslAuthenticate answers (`on_response`), and asks `refusal` of every other request while
it is `guarded`: before the client has authenticated, and once a terminated login's session
(KIP-368) has expired and the client has not logged in again. Modes: none (authenticated from the
start, SASL frames go upstream unread), terminate (`sasl.py`: kqp answers; before authentication
only ApiVersions and SASL are served, as Kafka does) and passthrough (`sasl_passthrough.py`: the
frames go upstream, the claimed name is adopted when the upstream's answer says it succeeded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kqp.protocol.apis import API_NAMES, ApiKey
from kqp.protocol.parts import Parts, joined
from kqp.quotas.model import ANONYMOUS, Principal

from .plans import SaslFrame
from .sasl import Authenticator, SaslPolicy, Verdict
from .sasl_passthrough import ClaimWatcher

__all__ = ["MAX_CLIENT_IDS", "Authentication", "Principals", "Route"]

MAX_CLIENT_IDS = 256   # principals cached per connection (a client may name a new client id each time)
MAX_SHARED_PRINCIPALS = 65536   # principals a `Principals` table holds before it starts afresh
_SASL = frozenset({ApiKey.SaslHandshake, ApiKey.SaslAuthenticate})   # a re-authentication's: served expired


class Principals:
    """One Principal object per (user, client id) across the connections that share this table (a
    process's, through `CoreWiring`): the quota and metrics tables look a principal up several times a
    request, and the very key object they hold is found without the field-by-field comparison that
    another connection's equal Principal would cost each time."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], Principal] = {}

    def of(self, user: str, client_id: str) -> Principal:
        p = self._known.get((user, client_id))
        if p is None:
            if len(self._known) >= MAX_SHARED_PRINCIPALS:
                self._known.clear()
            p = self._known[user, client_id] = Principal(user, client_id)
        return p


@dataclass(frozen=True, slots=True)
class Route:
    """What becomes of a SASL frame: it goes upstream (`verdict` and `refusal` None), kqp's own answer
    is queued (`verdict`), or the connection closes unanswered (`refusal`, the logged reason)."""

    verdict: Verdict | None = None
    refusal: str | None = None


FORWARD = Route()


class Authentication:
    def __init__(self, policy: SaslPolicy, shared: Principals | None = None) -> None:
        self.mode = policy.mode
        self.shared = Principals() if shared is None else shared   # the process's, handed by the core
        self.authenticated = policy.mode == "none"
        self.user = ANONYMOUS
        self.host = ""   # the client's IP, as ACLs name hosts
        self.session_end = math.inf   # loop time a terminated login's session expires (KIP-368)
        self.guarded = not self.authenticated   # requests are asked `refusal` first
        self.software: tuple[str, str] | None = None   # KIP-511's name and version, from ApiVersions v3+
        self.principals: dict[str | None, Principal] = {}   # by client id, for `user`
        self._server = Authenticator(policy) if policy.mode == "terminate" else None
        self._claims = ClaimWatcher(policy.principal_claim) if policy.mode == "passthrough" else None

    def principal(self, client_id: str | None) -> Principal:
        """The quota principal of a request from `client_id` on this connection, now."""
        p = self.principals.get(client_id)
        if p is None:
            if len(self.principals) >= MAX_CLIENT_IDS:   # a client cycling client ids: bounded memory
                self.principals.clear()
            p = self.principals[client_id] = self.shared.of(self.user, client_id or "")
        return p

    def adopt(self, user: str) -> None:
        """From now on the connection's traffic counts as `user`'s."""
        if user != self.user:
            self.user, self.principals = user, {}

    @property
    def refused_login(self) -> str | None:
        """Passthrough: why the upstream refused the connection's last login, until a new one starts."""
        return None if self._claims is None else self._claims.refused

    def refusal(self, api_key: int, before_authentication: bool, now: float) -> tuple[str, str] | None:
        """Why a request closes the connection (the close reason and the logged message), or None:
        kqp terminates SASL and the request's API is not one served before authentication
        (`Handler.before_authentication`), or the session expired and it does not begin a new login."""
        if self._server is None:
            return None
        if not self.authenticated:
            if before_authentication:
                return None
            return "authentication_required", f"{API_NAMES.get(api_key, api_key)} request before SASL authentication"
        if now < self.session_end or api_key in _SASL:
            return None
        return "session_expired", (f"{API_NAMES.get(api_key, api_key)} request after the SASL session of "
                                   f"{self.user!r} expired: the client did not re-authenticate (KIP-368)")

    def route(self, frame: SaslFrame) -> Route:
        """A SASL frame from the client."""
        if not frame.authenticate and frame.version == 0:
            # Advertised for librdkafka's sake (kqp.protocol.apis), never served: v0's tokens carry no header.
            return Route(refusal="SaslHandshake v0 (unframed SASL tokens) is not supported; clients since "
                                 "Kafka 1.0 send v1")
        if self._claims is not None:
            self._claims.on_request(frame.authenticate, frame.version, frame.body)
            return FORWARD
        if self._server is None:
            return FORWARD   # mode none: an upstream's own SASL, unread
        verdict = self._server.on_frame(frame.authenticate, frame.version, frame.correlation_id, frame.body)
        if verdict.user is not None:
            self.authenticated = True
            self.adopt(verdict.user)
            self.session_end = frame.now + verdict.session_ms / 1000 if verdict.session_ms else math.inf
            self.guarded = self.session_end < math.inf
        return Route(verdict=verdict)

    def on_response(self, version: int, frame: Parts) -> None:
        """The upstream's answer to a SaslAuthenticate (as the parts it arrived in): passthrough adopts
        the claimed name once the upstream says the exchange succeeded."""
        if self._claims is None:
            return
        user = self._claims.on_response(version, joined(frame))
        if user is not None:
            self.authenticated, self.guarded = True, False
            self.adopt(user)
