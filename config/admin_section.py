"""The ``admin:`` section, and the state file that kqp's quota admin API writes.

``admin.manage_quotas: true`` has kqp answer DescribeClientQuotas and AlterClientQuotas itself;
``principals`` (Kafka's form, ``User:ops``; an unauthenticated connection is ``User:ANONYMOUS``)
may alter; ``describe_principals``, when set, are the only others who may describe; ``state_file``
keeps the changes across restarts. The state file is YAML written by kqp and readable by people:
``entities:``, each with its names and quota values, ``null`` for a value removed through the API
(it hides the config file's value).

A state file that does not load stops kqp at start with one line naming the file, the entry and the
problem; kqp never drops it silently (a later change would overwrite what it could not read).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from kqp.config.errors import ConfigError, shown
from kqp.config.model import AdminConfig
from kqp.config.schema import Field, boolean, child, did_you_mean, name, optional, read_section
from kqp.quotas.admin_layer import AdminLayer
from kqp.quotas.model import QUOTA_TYPES, EntitySpec

_ENTITY_KEYS = ("user", "client_id", "client_id_prefix")
STATE_HEADER = "# written by kqp: quota changes made through Kafka's admin API (see README,\n" \
               "# \"Managing quotas with Kafka's admin API\"); null removes the config file's value\n"


def _principals(value: object, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ConfigError(path, f"must be a list of principals such as User:ops, got {shown(value)}")
    out: list[str] = []
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        text = name(item, where)
        kind, sep, rest = text.partition(":")
        if kind != "User" or not sep or not rest:
            raise ConfigError(where, f"must be Kafka's principal form User:NAME (User:ANONYMOUS for "
                                     f"unauthenticated clients), got {text!r}")
        out.append(text)
    return tuple(out)


ADMIN_FIELDS = {
    "manage_quotas": Field(boolean, False),
    "principals": Field(_principals, []),
    # None (unset): every client may describe, as before this key existed; a list, even empty: only
    # those listed and `principals` may (a broker's DESCRIBE_CONFIGS on the cluster).
    "describe_principals": Field(optional(_principals), None),
    "state_file": Field(optional(name), None),
}


def admin_config(value: object, path: str) -> AdminConfig:
    values: dict[str, Any] = read_section(value, path, ADMIN_FIELDS)
    if values["manage_quotas"]:
        if values["state_file"] is None:
            raise ConfigError(child(path, "state_file"), "required with manage_quotas: true (where quota "
                                                         "changes are kept across restarts)")
        if not values["principals"]:
            raise ConfigError(child(path, "principals"), "required with manage_quotas: true: who may alter "
                                                         "quotas, e.g. [User:ops]")
    return AdminConfig(**values)


def _entry(entry: object, path: str) -> tuple[EntitySpec, dict[str, float | None]]:
    if not isinstance(entry, Mapping):
        raise ConfigError(path, f"must be a mapping with user and/or client_id and quota values, got {shown(entry)}")
    ids: dict[str, str | None] = dict.fromkeys(_ENTITY_KEYS)
    values: dict[str, float | None] = {}
    for key, value in entry.items():
        where = child(path, key)
        if key in _ENTITY_KEYS:
            ids[key] = name(value, where)
        elif key in QUOTA_TYPES:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not math.isfinite(value) or value <= 0):
                raise ConfigError(where, f"must be a number > 0, or null (removed), got {shown(value)}")
            values[key] = None if value is None else float(value)
        else:
            raise ConfigError(where, f"unknown key; {did_you_mean(key, (*_ENTITY_KEYS, *QUOTA_TYPES))}")
    try:
        return EntitySpec(ids["user"], ids["client_id"], ids["client_id_prefix"]), values
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None


def parse_state(data: object, source: str) -> AdminLayer:
    """The admin layer a state file's data holds (None, an empty file, is an empty layer)."""
    try:
        section = read_section(data, "", {"entities": Field(lambda v, p: v, [])})
        entries = section["entities"] or []
        if not isinstance(entries, list):
            raise ConfigError("entities", f"must be a list of entity entries, got {shown(entries)}")
        layer: dict[EntitySpec, Mapping[str, float | None]] = {}
        for index, entry in enumerate(entries):
            spec, values = _entry(entry, f"entities[{index}]")
            if spec in layer:
                raise ConfigError(f"entities[{index}]", f"entity {spec.path} appears twice")
            layer[spec] = MappingProxyType(values)
    except ConfigError as exc:
        raise ConfigError(exc.key, f"admin state file: {exc.message}", source) from None
    return MappingProxyType(layer)


def state_document(layer: AdminLayer) -> dict[str, object]:
    """What :func:`parse_state` reads back as `layer`, entities in path order."""
    entries: list[dict[str, object]] = []
    for spec in sorted(layer, key=lambda s: s.path):
        entry: dict[str, object] = {key: getattr(spec, key) for key in _ENTITY_KEYS if getattr(spec, key) is not None}
        entry.update((str(key), value) for key, value in sorted(layer[spec].items()))
        entries.append(entry)
    return {"entities": entries}
