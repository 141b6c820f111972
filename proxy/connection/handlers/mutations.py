"""Metadata, CreateTopics, DeleteTopics and CreatePartitions, planned by the KIP-599 mutation gate.

The gate (`kqp.proxy.policies.mutation_gate`) decides each request with the rules of its API (the
registry binds one `MutationKind` per handler): what goes upstream, what to charge, a rewrite of the
upstream's answer (the merge with kqp's own topic errors, the topic cache's learning, and what the
answer settles), kqp's own answer when nothing goes, or that the topics must be looked up first,
after which the core plans the same request again (`Request.looked_up`). Metadata is here because
its answers feed the topic cache and may report topics it auto-created.
"""

from __future__ import annotations

from kqp.protocol.parts import joined
from kqp.proxy.policies.mutation_gate import MutationGate, MutationKind, MutationPlan, Rewrite

from ..events import Parts
from ..plans import AS_IS, LOOK_UP, PASS, Deferred, Flight, Handler, Plan, Replier, Reply, Request

__all__ = ["MetadataHandler", "MutationHandler"]


class Rewritten(Replier):
    """A response the gate reads (and may rewrite) whole, with what it settles."""

    __slots__ = ("rewrite",)

    def __init__(self, rewrite: Rewrite) -> None:
        self.rewrite = rewrite

    def reply(self, flight: Flight, frame: Parts, body_offset: int, now: float) -> Reply:
        whole, settled = self.rewrite(joined(frame), body_offset, now)
        return Reply((whole,), mutations=settled)


def _plan(gated: MutationPlan, request: memoryview) -> Plan | Deferred:
    if gated.needs_lookup:
        return LOOK_UP
    if gated.answer is not None:
        return Plan(None, answer=gated.answer, mutations=gated.charges)
    forward = AS_IS if gated.frame is request else (gated.frame,)
    if gated.rewrite is None and not gated.charges:
        return PASS if forward is AS_IS else Plan(forward)
    return Plan(forward, mutations=gated.charges, reply=None if gated.rewrite is None else Rewritten(gated.rewrite))


class MutationHandler(Handler):
    def __init__(self, gate: MutationGate, kind: MutationKind) -> None:
        self.gate, self.kind = gate, kind

    def plan(self, req: Request) -> Plan | Deferred:
        request = joined(req.frame)
        return _plan(self.gate.plan(self.kind, req.principal, req.hdr, request, req.now, req.looked_up), request)


class MetadataHandler(Handler):
    def __init__(self, gate: MutationGate) -> None:
        self.gate = gate

    def plan(self, req: Request) -> Plan | Deferred:
        request = joined(req.frame)
        return _plan(self.gate.metadata(req.principal, req.hdr, request, req.now, req.looked_up), request)
