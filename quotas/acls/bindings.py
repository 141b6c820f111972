"""Kafka's ACL vocabulary: resource types, pattern types, operations, permissions, bindings, filters.

The codes are the wire codes of Kafka's CreateAcls, DescribeAcls and DeleteAcls (and of the
authorized-operations bit fields), so a value read from a request is looked up without translation.
Names are read as `kafka-acls` and the Java `Admin` write them, in any case and with or without
underscores (`IdempotentWrite`, `IDEMPOTENT_WRITE`). A binding is a resource pattern with an access
control entry, as Kafka's `AclBinding`; a filter (`AclFilter`) matches bindings as Kafka's
`AclBindingFilter.matches` does, `MATCH` included (the bindings that would apply to one name).
`binding_problem` is the controller's check of a new binding (AclControlManager, AclApis). Pure: no
I/O, no clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["ALL_HOSTS", "CLUSTER_NAME", "WILDCARD", "AclBinding", "AclFilter", "Operation", "PatternType",
           "Permission", "ResourceType", "binding_problem", "parse_enum", "principal_problem", "supported_operations"]

E = TypeVar("E", bound=enum.IntEnum)
WILDCARD = "*"             # a literal resource name matching every name; a principal's `User:*`
ALL_HOSTS = "*"
CLUSTER_NAME = "kafka-cluster"   # the one name a CLUSTER resource has


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_SUPPORTED: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset({Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                                   Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                                   Operation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS,
                                   Operation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                                     Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                                     Operation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Operation.DESCRIBE}),
    ResourceType.USER: frozenset({Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS}),
}


def supported_operations(resource_type: ResourceType) -> frozenset[Operation]:
    """The operations a resource type has (Kafka's AclEntry.supportedOperations): what an
    authorized-operations bit field may name."""
    return _SUPPORTED[resource_type]


def parse_enum(kind: type[E], text: str) -> E:
    """`kind`'s member named `text` as Kafka's tools write it (`IdempotentWrite`, `idempotent_write`,
    `PREFIXED`); ValueError naming the choices otherwise."""
    wanted = text.replace("_", "").replace("-", "").upper()
    for member in kind:
        if member.name.replace("_", "") == wanted and member.name not in ("UNKNOWN", "ANY", "MATCH"):
            return member
    names = ", ".join(_shown(m) for m in kind if m.name not in ("UNKNOWN", "ANY", "MATCH"))
    raise ValueError(f"must be one of {names}, got {text!r}")


def _shown(member: enum.IntEnum) -> str:
    return "".join(part.capitalize() for part in member.name.split("_"))


def principal_problem(principal: str) -> str | None:
    """Why `principal` is not Kafka's `Type:Name` form (`User:alice`, `User:*`), or None."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        return f"principal must be Kafka's form Type:Name (User:alice, User:*), got {principal!r}"
    return None


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: `principal` may (ALLOW) or may not (DENY) do `operation` from `host` on the resources
    `resource_type`/`pattern_type`/`name` names (Kafka's AclBinding, flattened)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:   # as kafka-acls lists one
        return (f"{_shown(self.resource_type)}:{_shown(self.pattern_type).upper()}:{self.name} "
                f"{self.principal} {_shown(self.permission)} {_shown(self.operation)} from {self.host}")

    def as_dict(self) -> dict[str, str]:
        """The binding as the config file and the state file write it."""
        return {"principal": self.principal, "host": self.host, "operation": _shown(self.operation),
                "permission": _shown(self.permission), "resource_type": _shown(self.resource_type),
                "resource_name": self.name, "pattern_type": _shown(self.pattern_type)}


def binding_problem(binding: AclBinding) -> str | None:
    """Why the controller would refuse to create `binding` (INVALID_REQUEST), or None."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {binding.resource_type.name}"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {binding.pattern_type.name}"
    if binding.operation in (Operation.UNKNOWN, Operation.ANY):
        return f"Invalid operation {binding.operation.name}"
    if binding.permission not in (Permission.ALLOW, Permission.DENY):
        return f"Invalid permissionType {binding.permission.name}"
    if binding.resource_type is ResourceType.CLUSTER and binding.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not binding.name:
        return "Invalid empty resource name"
    if (problem := principal_problem(binding.principal)) is not None:
        return problem
    if not binding.host:
        return "Invalid empty host"
    return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None or ANY match anything; `pattern_type` MATCH matches the
    bindings that would apply to the literal `name` (itself, the wildcard, prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    @property
    def unknown(self) -> bool:
        """A filter naming an UNKNOWN value: Kafka refuses it (INVALID_REQUEST)."""
        return self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN \
            or self.operation is Operation.UNKNOWN or self.permission is Permission.UNKNOWN

    def matches(self, binding: AclBinding) -> bool:
        return self._pattern_matches(binding) and self._entry_matches(binding)

    def _pattern_matches(self, binding: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != binding.resource_type:
            return False
        kind = self.pattern_type
        if kind not in (PatternType.ANY, PatternType.MATCH) and kind != binding.pattern_type:
            return False
        if self.name is None:
            return True
        if kind in (PatternType.ANY, binding.pattern_type):
            return self.name == binding.name
        if binding.pattern_type is PatternType.LITERAL:
            return self.name == binding.name or binding.name == WILDCARD
        return self.name.startswith(binding.name)   # PREFIXED

    def _entry_matches(self, binding: AclBinding) -> bool:
        return ((self.principal is None or self.principal == binding.principal)
                and (self.host is None or self.host == binding.host)
                and (self.operation is Operation.ANY or self.operation == binding.operation)
                and (self.permission is Permission.ANY or self.permission == binding.permission))
