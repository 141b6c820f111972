"""The ``authorization:`` section, its ACL entries, and the ACL state file the admin API writes.

``authorization`` says whether kqp authorizes requests itself, as a broker's StandardAuthorizer
would: ``enabled`` (unset: on exactly when ``sasl.mode`` is ``terminate``, where only kqp knows the
user), ``super_users`` (Kafka's ``super.users``), ``allow_everyone_if_no_acl_found`` (off) and
``acls``, the config file's bindings, which reload live. ``state_file`` keeps what CreateAcls and
DeleteAcls changed. An ACL entry reads as `kafka-acls` writes one: ``principal``, ``operation`` or
``operations``, ``resource_type`` and ``resource_name`` (a Cluster's is ``kafka-cluster``),
``pattern_type`` (Literal), ``permission`` (Allow), ``host`` (``*``), Kafka's names in any case.

The state file is YAML written by kqp: ``acls`` (added through the API) and ``removed`` (the config
file's bindings deleted through it). One that does not load stops kqp at start, naming the entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kqp.config.errors import ConfigError, shown
from kqp.config.model import AuthorizationConfig
from kqp.config.schema import Field, boolean, child, did_you_mean, name, optional, read_section
from kqp.quotas.acls.admin_layer import AclLayer
from kqp.quotas.acls.bindings import (
    ALL_HOSTS,
    CLUSTER_NAME,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    binding_problem,
    parse_enum,
    principal_problem,
)

__all__ = ["ACL_STATE_HEADER", "acl_entries", "acl_state_document", "authorization_config", "parse_acl_state"]

ACL_STATE_HEADER = "# written by kqp: ACLs changed through Kafka's admin API (kafka-acls, Admin.createAcls);\n" \
                   "# acls: added; removed: the config file's ACLs deleted through the API\n"
_ENTRY_KEYS = ("principal", "operation", "operations", "resource_type", "resource_name", "pattern_type",
               "permission", "host")


def _principals(value: object, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ConfigError(path, f"must be a list of principals such as User:admin, got {shown(value)}")
    out = []
    for index, item in enumerate(value):
        text = name(item, f"{path}[{index}]")
        if (problem := principal_problem(text)) is not None:
            raise ConfigError(f"{path}[{index}]", problem)
        out.append(text)
    return tuple(out)


def _member(kind: type, value: object, path: str) -> Any:
    try:
        return parse_enum(kind, name(value, path))
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None


def _entry(entry: object, path: str) -> list[AclBinding]:
    """One ACL entry: a binding per operation it names."""
    if not isinstance(entry, Mapping):
        raise ConfigError(path, f"must be a mapping with principal, operation, resource_type and resource_name, "
                                f"got {shown(entry)}")
    for key in entry:
        if key not in _ENTRY_KEYS:
            raise ConfigError(child(path, key), f"unknown key; {did_you_mean(key, _ENTRY_KEYS)}")
    if ("operation" in entry) == ("operations" in entry):
        raise ConfigError(path, "needs exactly one of operation and operations")
    for key in ("principal", "resource_type"):
        if key not in entry:
            raise ConfigError(child(path, key), "required")
    resource_type = _member(ResourceType, entry["resource_type"], child(path, "resource_type"))
    if "resource_name" not in entry and resource_type is not ResourceType.CLUSTER:
        raise ConfigError(child(path, "resource_name"), "required (a Cluster's alone may be left out)")
    ops = entry.get("operations", [entry.get("operation")])
    if not isinstance(ops, list | tuple) or not ops:
        raise ConfigError(child(path, "operations"), f"must be a non-empty list, got {shown(ops)}")
    where = child(path, "operations" if "operations" in entry else "operation")
    operations = [_member(Operation, op, where if "operation" in entry else f"{where}[{i}]")
                  for i, op in enumerate(ops)]
    bindings = [AclBinding(resource_type, name(entry.get("resource_name", CLUSTER_NAME), child(path, "resource_name")),
                           _member(PatternType, entry.get("pattern_type", "Literal"), child(path, "pattern_type")),
                           name(entry["principal"], child(path, "principal")),
                           name(entry.get("host", ALL_HOSTS), child(path, "host")), op,
                           _member(Permission, entry.get("permission", "Allow"), child(path, "permission")))
                for op in operations]
    for binding in bindings:
        if (problem := binding_problem(binding)) is not None:
            raise ConfigError(path, problem)
    return bindings


def acl_entries(value: object, path: str) -> frozenset[AclBinding]:
    if value is None:
        return frozenset()
    if not isinstance(value, list | tuple):
        raise ConfigError(path, f"must be a list of ACL entries, got {shown(value)}")
    return frozenset(b for index, entry in enumerate(value) for b in _entry(entry, f"{path}[{index}]"))


AUTHORIZATION_FIELDS = {
    "enabled": Field(optional(boolean), None),   # None: on exactly in sasl.mode terminate (`loader`)
    "super_users": Field(_principals, []),
    "allow_everyone_if_no_acl_found": Field(boolean, False),
    "acls": Field(acl_entries, []),
    "state_file": Field(optional(name), None),
}


def authorization_config(value: object, path: str) -> AuthorizationConfig:
    return AuthorizationConfig(**read_section(value, path, AUTHORIZATION_FIELDS))


def parse_acl_state(data: object, source: str) -> AclLayer:
    """The layer an ACL state file's data holds (None, an empty file, is an empty layer)."""
    try:
        values = read_section(data, "", {"acls": Field(acl_entries, []), "removed": Field(acl_entries, [])})
    except ConfigError as exc:
        raise ConfigError(exc.key, f"ACL state file: {exc.message}", source) from None
    return AclLayer(values["acls"], values["removed"])


def acl_state_document(layer: AclLayer) -> dict[str, object]:
    """What :func:`parse_acl_state` reads back as `layer`, bindings in a stable order."""
    return {"acls": [b.as_dict() for b in sorted(layer.added)], "removed": [b.as_dict() for b in sorted(layer.removed)]}
