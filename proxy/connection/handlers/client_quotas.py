"""DescribeClientQuotas and AlterClientQuotas, answered by kqp when it manages quotas (`admin.manage_quotas`).

The answer is the quota admin policy's (`kqp.proxy.policies.quota_admin`); it waits its turn in the
in-flight FIFO like ApiVersions, and is charged to request quotas like any request a broker handles.
An Alter that changes something answers once the state file is committed: the policy's
`PendingCommit` goes on the record as its answer-to-be, and the core emits it as `CommitQuotas`.
Without `admin.manage_quotas` no handler is registered for these APIs and they go upstream.
"""

from __future__ import annotations

from kqp.protocol.parts import joined
from kqp.proxy.policies.quota_admin import QuotaAdmin

from ..exchange import Handler, Request

__all__ = ["ClientQuotasHandler"]


class ClientQuotasHandler(Handler):
    def __init__(self, admin: QuotaAdmin) -> None:
        self.admin = admin

    def on_request(self, req: Request) -> None:
        hdr, entry = req.hdr, req.entry
        entry.local_response = self.admin.answer(entry.principal, hdr.api_key, hdr.api_version, hdr.correlation_id,
                                                 joined(req.frame)[hdr.body_offset:])
        return None
