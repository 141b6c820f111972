"""Who a connection's user is: the one place the core asks, whatever `sasl.mode` says.

The core hands every SASL frame, and every frame before the client has authenticated, to
`Authentication.on_request`, and every SaslAuthenticate response to `on_response`; it gets back
what to do (`Route`) and whom to count the connection's traffic as from then on. The modes:

* none: nobody authenticates; the connection is authenticated from the start, its user ANONYMOUS,
  and SASL frames (an upstream's own SASL) go through unread.
* terminate (`sasl.py`): kqp answers the SASL frames itself; before authentication nothing else
  but ApiVersions is answered, and anything else closes the connection, as Kafka does.
* passthrough (`sasl_passthrough.py`): the frames go upstream; the claimed name is adopted when
  the upstream's response says the exchange succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass

from kqp.protocol.apis import API_NAMES, ApiKey

from .requests import SASL_APIS
from .sasl import Authenticator, SaslPolicy, Verdict
from .sasl_passthrough import ClaimWatcher

__all__ = ["Authentication", "Route"]


@dataclass(frozen=True, slots=True)
class Route:
    """What the core does with a request: plan it as usual (`verdict` and `refusal` None), queue
    kqp's own SASL answer (`verdict`), or close the connection (`refusal`, the logged reason)."""

    verdict: Verdict | None = None
    refusal: str | None = None


FORWARD = Route()


class Authentication:
    def __init__(self, policy: SaslPolicy) -> None:
        self.mode = policy.mode
        self.authenticated = policy.mode == "none"
        self._server = Authenticator(policy) if policy.mode == "terminate" else None
        self._claims = ClaimWatcher(policy.principal_claim) if policy.mode == "passthrough" else None

    def concerns(self, api_key: int) -> bool:
        """Whether a request must be shown to `on_request` before it is planned."""
        return api_key in SASL_APIS or not self.authenticated

    def on_request(self, api_key: int, version: int, correlation_id: int, body: memoryview) -> Route:
        if api_key == ApiKey.SaslHandshake and version == 0:
            # Advertised for librdkafka's sake (kqp.protocol.apis), never served: v0's tokens carry no header.
            return Route(refusal="SaslHandshake v0 (unframed SASL tokens) is not supported; clients since "
                                 "Kafka 1.0 send v1")
        if self._server is None and self._claims is None:
            return FORWARD   # mode none: an upstream's own SASL, unread
        if self._claims is not None:
            if api_key in SASL_APIS:
                self._claims.on_request(api_key, version, body)
            return FORWARD
        assert self._server is not None
        if api_key in SASL_APIS:
            verdict = self._server.on_frame(api_key, version, correlation_id, body)
            if verdict.user is not None:
                self.authenticated = True
            return Route(verdict=verdict)
        if api_key == ApiKey.ApiVersions:
            return FORWARD   # answered by kqp, exempt from request quotas before authentication
        return Route(refusal=f"{API_NAMES.get(api_key, api_key)} request before SASL authentication")

    def on_response(self, api_key: int, version: int, frame: memoryview) -> str | None:
        """An upstream response: the user the connection belongs to from now on, if that changed."""
        if self._claims is None or api_key != ApiKey.SaslAuthenticate:
            return None
        user = self._claims.on_response(version, frame)
        if user is not None:
            self.authenticated = True
        return user
