"""The quotas changed through Kafka's admin API, as a layer over the config file's quotas.

kqp has two stores where Kafka has one: the YAML file (the base, owned by whoever edits it) and the
state file that AlterClientQuotas writes (`admin.state_file`). An `AdminLayer` is the state file's
content: per entity, per quota type, a value or ``None``. `overlay` lays it over the base: a value
in the layer wins (the later, explicit change, as Kafka's last AlterClientQuotas wins); ``None``
hides the base's value, so a quota removed through the API is gone whatever the YAML says.

Pure and immutable: every function returns new mappings, so a change is computed off to the side and
swapped in whole through `QuotaManager.update_settings`, exactly as a config reload is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from kqp.quotas.model import EntitySpec, QuotaSettings

__all__ = ["CONFIG_FILE", "STATE_FILE", "AdminLayer", "Change", "apply_changes", "overlay", "sources"]

#: entity -> {quota type: value, or None for "removed, hiding the config file's value"}
AdminLayer = Mapping[EntitySpec, Mapping[str, float | None]]
#: One entity's alteration: {quota type: the new value, or None to remove it}
Change = tuple[EntitySpec, Mapping[str, float | None]]

CONFIG_FILE, STATE_FILE = "config file", "state file"   # where an effective value comes from
EMPTY: AdminLayer = MappingProxyType({})


def overlay(base: QuotaSettings, layer: AdminLayer) -> QuotaSettings:
    """The settings in force: `base` with `layer` laid over its entities."""
    if not layer:
        return base
    merged: dict[EntitySpec, dict[str, float]] = {spec: dict(values) for spec, values in base.entities.items()}
    for spec, values in layer.items():
        entity = merged.setdefault(spec, {})
        for quota_type, value in values.items():
            if value is None:
                entity.pop(quota_type, None)
            else:
                entity[quota_type] = value
    kept = {spec: values for spec, values in merged.items() if values}
    # Windows, algorithms and modes stay the config file's (an entity the API adds measures with
    # quotas.algorithm, in quotas.mode); an algorithm or mode for an entity left with no quota goes with it.
    return dataclasses.replace(base, entities=kept,
                               algorithms={spec: a for spec, a in base.algorithms.items() if spec in kept},
                               modes={spec: m for spec, m in base.modes.items() if spec in kept})


def apply_changes(layer: AdminLayer, base: QuotaSettings, changes: Iterable[Change]) -> AdminLayer:
    """`layer` after `changes`. A removal leaves a ``None`` only where the base sets the value."""
    result: dict[EntitySpec, dict[str, float | None]] = {spec: dict(values) for spec, values in layer.items()}
    for spec, ops in changes:
        entity = result.setdefault(spec, {})
        in_base = base.entities.get(spec, {})
        for quota_type, value in ops.items():
            if value is not None:
                entity[quota_type] = value
            elif quota_type in in_base:
                entity[quota_type] = None
            else:
                entity.pop(quota_type, None)
        if not entity:
            del result[spec]
    return MappingProxyType({spec: MappingProxyType(values) for spec, values in result.items()})


def sources(base: QuotaSettings, layer: AdminLayer) -> list[tuple[EntitySpec, str, float, str]]:
    """Every effective value with where it comes from, sorted by entity path then type; values the
    layer hides are listed too, as ``(entity, type, config value, "removed by the state file")``."""
    rows: list[tuple[EntitySpec, str, float, str]] = []
    for spec in {*base.entities, *layer}:
        in_base, in_layer = base.entities.get(spec, {}), layer.get(spec, {})
        for quota_type in {*in_base, *in_layer}:
            if quota_type in in_layer:
                value = in_layer[quota_type]
                if value is None:
                    if quota_type not in in_base:
                        continue   # a removal the config file no longer needs: it hides nothing
                    rows.append((spec, quota_type, in_base[quota_type], f"removed by the {STATE_FILE}"))
                else:
                    rows.append((spec, quota_type, value, STATE_FILE))
            else:
                rows.append((spec, quota_type, in_base[quota_type], CONFIG_FILE))
    return sorted(rows, key=lambda row: (row[0].path, row[1]))
