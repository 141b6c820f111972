"""Authorization as the first step of planning a request, and the ACL admin API kqp answers.

With `authorization` on, the registry puts every API's handler behind `Authorized`: the request is
authorized first (`kqp.proxy.policies.authorization.checks`), then planned by its own handler as if it
had come as forwarded: allowed, as it came; refused in part, the rest (charged as the whole
request, as a broker charges it); and the response side puts the refused back into the answer
after the handler's own reading of it (`Rewriting`). Refused whole, kqp answers and nothing goes; a
refusal the broker meets by closing the connection (an acks=0 Produce, an API kqp cannot authorize)
closes it. DescribeAcls, CreateAcls and DeleteAcls are answered by kqp's ACL admin policy, a change
only once its state file is written (the policy's `PendingAclCommit`), as AlterClientQuotas is.
"""

from __future__ import annotations

from collections.abc import Callable

from kqp.protocol.parts import joined, with_body
from kqp.proxy.policies.authorization.acl_admin import AclAdmin
from kqp.proxy.policies.authorization.checks import ALLOWED, RequestAuthorization

from ..events import Parts
from ..plans import AS_IS, LOOK_UP, Deferred, Flight, Handler, Plan, Replier, Reply, Request
from ..settings import CoreSettings

__all__ = ["Authorized", "CreateAclsHandler", "DeleteAclsHandler", "DescribeAclsHandler", "Rewriting"]


class Rewriting(Replier):
    """A response side that hands the response to the handler's own first, then to authorization's:
    `watch` reads the upstream's answer as it came, `rewrite` makes a new one of it."""

    __slots__ = ("inner", "rewrite", "watch")

    def __init__(self, inner: Replier | None, rewrite: Callable[[memoryview, int], bytes] | None,
                 watch: Callable[[Parts, int], None] | None = None) -> None:
        self.inner, self.rewrite, self.watch = inner, rewrite, watch

    def reply(self, flight: Flight, frame: Parts, body_offset: int, now: float) -> Reply:
        if self.watch is not None:
            self.watch(frame, body_offset)
        reply = Reply(frame) if self.inner is None else self.inner.reply(flight, frame, body_offset, now)
        if self.rewrite is None:
            return reply
        return reply._replace(frame=(self.rewrite(joined(reply.frame), body_offset),))

    def withheld(self, flight: Flight, frame: Parts, body_offset: int, throttle_ms: int,
                 settings: CoreSettings) -> Parts | None:
        return None if self.inner is None else self.inner.withheld(flight, frame, body_offset, throttle_ms, settings)


class Authorized(Handler):
    """An API's handler behind kqp's authorization."""

    def __init__(self, inner: Handler, authorization: RequestAuthorization) -> None:
        self.inner, self.authorization = inner, authorization
        self.before_authentication = inner.before_authentication

    def plan(self, req: Request) -> Plan | Deferred:
        hdr = req.hdr
        verdict = self.authorization.check(hdr, req.head, req.frame, f"User:{req.principal.user}", req.host,
                                           req.looked_up, req.node)
        if verdict is ALLOWED:
            return self.inner.plan(req)
        if verdict.look_up:
            return LOOK_UP
        if verdict.close is not None:
            return Plan(None, expects_response=False, exempt=True, close=verdict.close)
        if verdict.answer is not None:
            return Plan(None, answer=verdict.answer)
        if verdict.body is not None:
            frame = memoryview(with_body(joined(req.frame), hdr.body_offset, verdict.body))
            req = Request(hdr, frame, (frame,), req.size, req.principal, req.now, req.authenticated, req.looked_up,
                          req.node, req.host)
        plan = self.inner.plan(req)
        if plan is LOOK_UP:
            return plan
        assert isinstance(plan, Plan)
        if verdict.body is not None and plan.forward is AS_IS:
            plan = plan._replace(forward=req.frame)
        if verdict.rewrite is not None or verdict.watch is not None:
            plan = plan._replace(reply=Rewriting(plan.reply, verdict.rewrite, verdict.watch))
        return plan


class _AclHandler(Handler):
    def __init__(self, admin: AclAdmin) -> None:
        self.admin = admin

    def _args(self, req: Request) -> tuple[str, str, int, int, memoryview]:
        hdr = req.hdr
        return (f"User:{req.principal.user}", req.host, hdr.api_version, hdr.correlation_id,
                joined(req.frame)[hdr.body_offset:])


class DescribeAclsHandler(_AclHandler):
    def plan(self, req: Request) -> Plan:
        return Plan(None, answer=self.admin.describe(*self._args(req)))


class CreateAclsHandler(_AclHandler):
    def plan(self, req: Request) -> Plan:
        return Plan(None, answer=self.admin.create(*self._args(req)))


class DeleteAclsHandler(_AclHandler):
    def plan(self, req: Request) -> Plan:
        return Plan(None, answer=self.admin.delete(*self._args(req)))
