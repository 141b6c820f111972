"""DescribeClientQuotas and AlterClientQuotas, answered by kqp when it manages quotas (`admin.manage_quotas`).

The answer is the quota admin policy's (`kqp.proxy.policies.quota_admin`); it waits its turn in the
in-flight FIFO like ApiVersions, and is charged to request quotas like any request a broker handles.
An Alter that changes something answers once the state file is committed: the policy's
`PendingCommit` is the plan's answer-to-be, which the core asks the runtime for (`CommitQuotas`).
Without `admin.manage_quotas` no handler is registered for these APIs and they go upstream.
"""

from __future__ import annotations

from kqp.protocol.parts import joined
from kqp.proxy.policies.quota_admin import QuotaAdmin

from ..plans import Handler, Plan, Request

__all__ = ["AlterClientQuotasHandler", "DescribeClientQuotasHandler"]


class DescribeClientQuotasHandler(Handler):
    def __init__(self, admin: QuotaAdmin) -> None:
        self.admin = admin

    def plan(self, req: Request) -> Plan:
        hdr = req.hdr
        return Plan(None, answer=self.admin.describe(req.principal, hdr.api_version, hdr.correlation_id,
                                                     joined(req.frame)[hdr.body_offset:]))


class AlterClientQuotasHandler(Handler):
    def __init__(self, admin: QuotaAdmin) -> None:
        self.admin = admin

    def plan(self, req: Request) -> Plan:
        hdr = req.hdr
        return Plan(None, answer=self.admin.alter(req.principal, hdr.api_version, hdr.correlation_id,
                                                  joined(req.frame)[hdr.body_offset:]))
