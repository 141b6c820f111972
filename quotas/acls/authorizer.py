"""Who may do what: Kafka's StandardAuthorizer, as a pure function of the ACLs in force.

`Authorizer` is built from a set of `AclBinding`s, the super users and
`allow.everyone.if.no.acl.found`, and never changes: a change of the ACLs builds a new one, so a
decision never sees half a change and its cache needs no invalidation. The rules are Kafka's:
super users may do anything; the ACLs that apply to a resource are its literal name's, the literal
wildcard `*`'s and every prefixed pattern the name starts with; of those whose principal is the
requester's or `User:*` and whose host is the client's or `*`, a DENY wins over any ALLOW; an ALLOW
of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and of ALTER_CONFIGS DESCRIBE_CONFIGS (a DENY
implies nothing); with no ACL on the resource at all (whoever it names) the answer is the default,
DENY unless `allow_everyone_if_no_acl_found`. `decide` says which rule decided, for `kqp explain`
and the denial log; `authorize` is the same answer, cached per (principal, host, operation,
resource). `authorize_by_resource_type` is Kafka's for "may write some topic" (an idempotent
producer's InitProducerId); `narrows` whether a change may take something from someone. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from kqp.quotas.acls.bindings import (
    WILDCARD,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    supported_operations,
)

__all__ = ["Authorizer", "Decision", "narrows"]

MAX_CACHED = 65536   # decisions kept before the cache starts afresh (principals x resources in use)
_IMPLIES_DESCRIBE = frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})
_ANY_NAME = "hardcode"   # Kafka's authorizeByResourceType asks about this name first (super users pass)


class Decision(NamedTuple):
    """One answer and the rule that gave it."""

    allowed: bool
    rule: str                          # super_user, acl, no_matching_allow, default, unauthorizable
    binding: AclBinding | None = None  # the ACL that decided (rule acl)

    def __str__(self) -> str:
        if self.rule == "super_user":
            return "a super user"
        if self.rule == "unauthorizable":
            return "kqp cannot authorize this API or version: super users alone may send it"
        if self.binding is not None:
            return f"{'allowed' if self.allowed else 'denied'} by ACL {self.binding}"
        if self.rule == "default":
            return ("no ACL names the resource: allow.everyone.if.no.acl.found" if self.allowed
                    else "no ACL names the resource, and allow_everyone_if_no_acl_found is off")
        return "ACLs name the resource, none allows this principal the operation from this host"


SUPER_USER = Decision(True, "super_user")


class Authorizer:
    def __init__(self, bindings: Iterable[AclBinding] = (), super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.bindings: tuple[AclBinding, ...] = tuple(sorted(set(bindings)))
        self.super_users = frozenset(super_users)
        self.allow_if_none = allow_everyone_if_no_acl_found
        # resource type -> literal name -> bindings; resource type -> prefix -> bindings
        self._literal: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        self._prefixed: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        for b in self.bindings:
            table = self._literal if b.pattern_type is PatternType.LITERAL else self._prefixed
            table.setdefault(b.resource_type, {}).setdefault(b.name, []).append(b)
        self._longest_prefix = {t: max(map(len, names)) for t, names in self._prefixed.items()}
        self._cache: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        allowed = self._cache.get(key)
        if allowed is None:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            allowed = self._cache[key] = self.decide(principal, host, operation, resource_type, name).allowed
        return allowed

    def decide(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
               name: str) -> Decision:
        if principal in self.super_users:
            return SUPER_USER
        applicable = self._applicable(resource_type, name)
        if not applicable:
            return Decision(self.allow_if_none, "default")
        allow: AclBinding | None = None
        for binding in applicable:
            result = _result(binding, principal, host, operation)
            if result is Permission.DENY:
                return Decision(False, "acl", binding)
            if result is Permission.ALLOW and allow is None:
                allow = binding
        if allow is not None:
            return Decision(True, "acl", allow)
        return Decision(False, "no_matching_allow")

    def _applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding whose pattern covers `name`: its literal, the wildcard, the prefixes."""
        found: list[AclBinding] = []
        literal = self._literal.get(resource_type)
        if literal:
            found += literal.get(name, ())
            if name != WILDCARD:
                found += literal.get(WILDCARD, ())
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for end in range(1, min(len(name), self._longest_prefix[resource_type]) + 1):
                found += prefixed.get(name[:end], ())
        return found

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field: bit `op` set for each supported operation allowed."""
        field = 0
        for op in supported_operations(resource_type):
            if self.authorize(principal, host, op, resource_type, name):
                field |= 1 << op
        return field

    def authorize_by_resource_type(self, principal: str, host: str, operation: Operation,
                                   resource_type: ResourceType) -> bool:
        """Whether `principal` may do `operation` on some resource of `resource_type` (Kafka's
        Authorizer.authorizeByResourceType): an ALLOW that no DENY of a prefix of it dominates."""
        if self.authorize(principal, host, operation, resource_type, _ANY_NAME):
            return True
        deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        wildcard_allow = False
        for b in self.bindings:
            if b.resource_type != resource_type or b.host not in (host, WILDCARD) \
                    or b.principal not in (principal, "User:*") or b.operation not in (operation, Operation.ALL):
                continue
            if b.permission is Permission.DENY:
                if b.pattern_type is PatternType.LITERAL and b.name == WILDCARD:
                    return False
                deny[b.pattern_type].add(b.name)
            elif b.pattern_type is PatternType.LITERAL and b.name == WILDCARD:
                wildcard_allow = True
            else:
                allow[b.pattern_type].add(b.name)
        if wildcard_allow:
            return True
        for kind, names in allow.items():
            for name in names:
                if kind is PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                    continue
                if not any(name[:end] in deny[PatternType.PREFIXED] for end in range(1, len(name) + 1)):
                    return True
        return False

    def acls(self, flt: AclFilter) -> list[AclBinding]:
        """The bindings `flt` matches (DescribeAcls), in a stable order."""
        return [b for b in self.bindings if flt.matches(b)]


def narrows(before: Authorizer, after: Authorizer) -> bool:
    """Whether `after` may allow someone less than `before` did: an ACL taken away, a DENY added, a
    super user gone, the default turned to DENY, or (while it is ALLOW) a first ACL on a resource."""
    if not before.super_users <= after.super_users or before.allow_if_none > after.allow_if_none:
        return True
    old, new = set(before.bindings), set(after.bindings)
    added = new - old
    return bool(old - new) or any(b.permission is Permission.DENY for b in added) or (after.allow_if_none
                                                                                      and bool(added))


def _result(binding: AclBinding, principal: str, host: str, operation: Operation) -> Permission | None:
    """What `binding` says of this request (Kafka's findResult), or None when it does not apply."""
    if binding.principal != principal and binding.principal != "User:*":
        return None
    if binding.host != WILDCARD and binding.host != host:
        return None
    if binding.operation is not Operation.ALL:
        if binding.permission is Permission.ALLOW:
            if operation is Operation.DESCRIBE:
                if binding.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation is Operation.DESCRIBE_CONFIGS:
                if binding.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation != binding.operation:
                return None
        elif operation != binding.operation:
            return None
    return binding.permission
