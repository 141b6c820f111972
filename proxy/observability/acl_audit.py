"""The audit trail of ACL changes, as quota changes have one: an event per binding, logged and counted.

Every change of the ACLs in force is one event per binding added or removed, on the `kqp.audit`
logger (`acl audit: admin_api by User:ops: Topic:LITERAL:a User:alice Allow Write from * none ->
{...}`, the fields as `extra=` for `--log-format json`), counted in `kqp_acl_changes_total{source}`
and kept in the ACL state file's history (`<authorization.state_file>.history.jsonl`), the quota
history's format: ``entity`` is the binding as `kafka-acls` lists it, ``before`` and ``after`` the
binding's fields or empty. Sources as for quotas: ``admin_api`` (CreateAcls, DeleteAcls; `who` the
principal), ``reload`` (the config file's `authorization.acls`), ``state_file`` (at start, or
written by another process).
"""

from __future__ import annotations

from collections.abc import Set

from kqp.quotas.acls.bindings import AclBinding

from .quota_audit import Audit, AuditEvent, utc_stamp

__all__ = ["AclAudit"]


class AclAudit(Audit):
    kind = "acl"
    metric = ("kqp_acl_changes", "ACL bindings added to or removed from those in force, by where the change came "
              "from (admin_api, reload, state_file)")

    def events(self, old: Set[AclBinding], new: Set[AclBinding], who: str | None, source: str) -> list[AuditEvent]:
        """One event per binding in force in only one of `old` and `new`."""
        ts = utc_stamp(self._wall())
        return [*(self._event(ts, who, source, str(b), {}, b.as_dict()) for b in sorted(new - old)),
                *(self._event(ts, who, source, str(b), b.as_dict(), {}) for b in sorted(old - new))]
