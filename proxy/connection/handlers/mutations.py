"""Metadata, CreateTopics, DeleteTopics and CreatePartitions through the KIP-599 mutation gate.

The gate (`kqp.proxy.policies.mutation_gate`) decides each request: what goes upstream, the quota
violations known now, kqp's own answer when nothing goes, a rewrite of the upstream's answer (the
merge with kqp's own topic errors, the topic cache's learning), or that the topics must be looked
up first, after which the core hands this handler the same request again (`looked_up`). Metadata
is here because its answers feed the topic cache and may report topics it auto-created.
"""

from __future__ import annotations

from kqp.protocol.parts import joined
from kqp.proxy.policies.mutation_gate import MutationGate

from ..authentication import Authentication
from ..events import Parts
from ..exchange import LOOK_UP, Handler, Hold, InFlight, Request

__all__ = ["MutationHandler"]


class MutationHandler(Handler):
    def __init__(self, gate: MutationGate) -> None:
        self.gate = gate

    def on_request(self, req: Request) -> Parts | Hold | None:
        entry = req.entry
        plan = self.gate.plan(entry.principal, req.hdr, joined(req.frame), entry.sent_at, req.looked_up)
        if plan.needs_lookup:
            return LOOK_UP
        entry.rewrite, entry.violations = plan.rewrite, plan.violations
        if plan.answer is not None:
            entry.local_response = plan.answer
            return None
        return (plan.frame,)

    def on_response(self, entry: InFlight, frame: Parts, body_offset: int, now: float,
                    auth: Authentication) -> Parts:
        if entry.rewrite is None:
            return frame
        # The gate reads (and may rewrite) these small answers whole.
        return (entry.rewrite(joined(frame), body_offset, now),)
