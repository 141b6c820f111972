"""An admin API answer that waits for a state file: what the core asks the runtime to commit first.

An AlterClientQuotas, CreateAcls or DeleteAcls that changes something is answered only once its
change is written to the state file and in force. Its policy answers with a `Pending` instead of
bytes; the core stops its in-flight FIFO at it and asks the runtime for the commit (an action
chosen by its kind: `PendingCommit` for quotas, `PendingAclCommit` for ACLs), and `answer(error)`
is the response once the commit is done (`error` None) or failed (nothing changed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Pending", "PendingAclCommit", "PendingCommit"]


@dataclass(frozen=True)
class Pending:
    changes: tuple[Any, ...]
    who: str                                   # Kafka's form, User:ops: the log's and the audit trail's
    answer: Callable[[str | None], bytes]


@dataclass(frozen=True)
class PendingCommit(Pending):
    """Quota changes (`kqp.quotas.admin_layer.Change`) for the quota state file."""


@dataclass(frozen=True)
class PendingAclCommit(Pending):
    """ACL changes (`kqp.quotas.acls.admin_layer.AclChange`) for the ACL state file."""
