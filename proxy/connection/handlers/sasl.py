"""SaslHandshake and SaslAuthenticate, whatever `sasl.mode` says; exempt from request quotas (KIP-124).

The plan hands the frame to the connection's `Authentication`, which routes it: with `terminate`
kqp's own answer (waiting its turn in the in-flight FIFO), the user the connection now belongs to,
or why it closes once the answer is out; with `passthrough` the frame goes upstream and the upstream's
SaslAuthenticate answer goes back to the authentication (`Reply.sasl_answer`), which adopts the
claimed name once the exchange succeeded; with `none` the frames go upstream unread. A SaslHandshake
v0 closes the connection unanswered in every mode. Both are served before authentication.
"""

from __future__ import annotations

from kqp.protocol.parts import joined

from ..events import Parts
from ..plans import Flight, Handler, Plan, Replier, Reply, Request, SaslFrame

__all__ = ["SaslHandler"]


class SaslAnswer(Replier):
    def reply(self, flight: Flight, frame: Parts, body_offset: int, now: float) -> Reply:
        return Reply(frame, sasl_answer=True)


class SaslHandler(Handler):
    before_authentication = True

    def __init__(self, authenticate: bool) -> None:
        self.authenticate = authenticate   # SaslAuthenticate; else SaslHandshake
        self._reply = SaslAnswer() if authenticate else None

    def plan(self, req: Request) -> Plan:
        hdr = req.hdr
        frame = SaslFrame(self.authenticate, hdr.api_version, hdr.correlation_id, joined(req.frame)[hdr.body_offset:],
                          req.now)
        return Plan(exempt=True, sasl=frame, reply=self._reply)
