"""SaslHandshake and SaslAuthenticate, whatever `sasl.mode` says; exempt from request quotas (KIP-124).

The connection's `Authentication` (`kqp.proxy.connection.authentication`) decides each frame: with
`terminate`, kqp's own answer (which waits its turn in the in-flight FIFO), the user the connection
now belongs to, or why it closes once the answer is out; with `passthrough` the frame goes upstream
and the claimed name is adopted when the upstream's SaslAuthenticate answer says it succeeded; with
`none` the frames go upstream unread (an upstream's own SASL). A SaslHandshake v0 closes the
connection unanswered in every mode.
"""

from __future__ import annotations

from kqp.protocol.parts import joined

from ..authentication import Authentication
from ..events import Parts
from ..exchange import Handler, InFlight, Refused, Request

__all__ = ["SaslHandler"]


class SaslHandler(Handler):
    def on_request(self, req: Request) -> Parts | None:
        hdr, entry, auth = req.hdr, req.entry, req.auth
        entry.exempt = True
        route = auth.on_request(hdr.api_key, hdr.api_version, hdr.correlation_id, joined(req.frame)[hdr.body_offset:])
        if route.refusal is not None:   # as Kafka: no answer, the connection closes
            raise Refused("authentication_required", route.refusal)
        verdict = route.verdict
        if verdict is None:
            return req.frame
        if verdict.user is not None:   # the answer already counts as the user it authenticates
            entry.principal = auth.principal(hdr.client_id)
        entry.local_response, entry.close_after = verdict.answer, verdict.failure
        return None

    def on_response(self, entry: InFlight, frame: Parts, body_offset: int, now: float,
                    auth: Authentication) -> Parts:
        auth.on_response(entry.api_key, entry.api_version, frame)
        return frame
