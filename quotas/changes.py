"""What a settings change changes: one line per quota, pool or share for the log, and one
`EntityChange` per entity for the audit trail.

A config reload and an admin change both go through `QuotaManager.update_settings`, which logs the
lines of `describe_changes` with what the change did to the measurements (sensors restarted or
released). `entity_changes` is the same comparison as data, for the audit trail: each entity
whose quota values in force differ, with all of them before and after (not only the keys that
changed, so one record reads on its own). Entities are named by Kafka's config paths, pools by their
names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kqp.quotas.model import QUOTA_TYPES, EntitySpec, QuotaSettings
from kqp.quotas.pools.spec import MemberShare, PoolSpec


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def _values(what: str, before: Mapping[str, float], after: Mapping[str, float],
            order: Iterable[str] | None = None) -> list[str]:
    """One line per key set, removed or changed, in `order` (default: before's keys, then after's)."""
    lines: list[str] = []
    for key in order if order is not None else [*before, *(k for k in after if k not in before)]:
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if a is None:
            lines.append(f"{what}: {key} set to {_number(b)}")   # type: ignore[arg-type]
        elif b is None:
            lines.append(f"{what}: {key} removed (was {_number(a)})")
        else:
            lines.append(f"{what}: {key} {_number(a)} -> {_number(b)}")
    return lines


def _pool_lines(old: tuple[PoolSpec, ...], new: tuple[PoolSpec, ...]) -> list[str]:
    before, after = {p.name: p for p in old}, {p.name: p for p in new}
    lines: list[str] = []
    for name in [*before, *(n for n in after if n not in before)]:
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        if a is None or b is None:
            pool = b or a
            budgets = ", ".join(f"{t} {_number(v)}" for t, v in pool.budgets.items())   # type: ignore[union-attr]
            lines.append(f"pool {name} {'added' if a is None else 'removed'} ({budgets})")
            continue
        lines += _values(f"pool {name}", dict(a.budgets), dict(b.budgets))
        for part in ("members", "topics", "adaptive", "classes"):
            if getattr(a, part) != getattr(b, part):
                lines.append(f"pool {name}: {part} changed")
        if a.mode != b.mode:
            lines.append(f"pool {name}: mode {a.mode or 'default'} -> {b.mode or 'default'}")
    return lines


def describe_changes(old: QuotaSettings, new: QuotaSettings) -> list[str]:
    """One line per quota set, removed or changed, per pool and per member share."""
    lines: list[str] = []
    if (old.window_size_seconds, old.window_count) != (new.window_size_seconds, new.window_count):
        lines.append(
            f"quota window {old.window_count} x {_number(old.window_size_seconds)}s -> "
            f"{new.window_count} x {_number(new.window_size_seconds)}s: all measurements restart"
        )
    if old.algorithm != new.algorithm:
        lines.append(f"quotas.algorithm {old.algorithm} -> {new.algorithm}")
    if old.mode != new.mode:
        lines.append(f"quotas.mode {old.mode} -> {new.mode}")
    if old.pacing != new.pacing:
        lines.append(f"quotas.pacing {'on' if old.pacing else 'off'} -> {'on' if new.pacing else 'off'}")
    for spec in sorted(set(old.entities) | set(new.entities), key=lambda e: e.path):
        a, b = old.algorithms.get(spec), new.algorithms.get(spec)
        if a != b and spec in old.entities and spec in new.entities:
            lines.append(f"{spec.path}: algorithm {a or 'default'} -> {b or 'default'}")
        a, b = old.modes.get(spec), new.modes.get(spec)
        if a != b and spec in old.entities and spec in new.entities:
            lines.append(f"{spec.path}: mode {a or 'default'} -> {b or 'default'}")
        lines += _values(spec.path, old.entities.get(spec, {}), new.entities.get(spec, {}), QUOTA_TYPES)
    lines += _pool_lines(old.pools, new.pools)
    for spec in sorted(set(old.shares) | set(new.shares), key=lambda e: e.path):
        lines += _values(f"{spec.path} (pool member)", _share(old.shares.get(spec)), _share(new.shares.get(spec)),
                         ("weight", "min_share", "max_share"))
    return lines


def _share(share: MemberShare | None) -> dict[str, float]:
    """A member's share as values: its weight, and its bounds where set (none: not a member entry)."""
    if share is None:
        return {}
    bounds = {"min_share": share.min_share} if share.min_share else {}
    return {"weight": share.weight, **bounds, **({"max_share": share.max_share} if share.max_share != 1 else {})}


@dataclass(frozen=True)
class EntityChange:
    """One entity's quotas in force before and after a change, by quota type ({}: none)."""

    entity: EntitySpec
    before: Mapping[str, float]
    after: Mapping[str, float]


def entity_changes(old: QuotaSettings, new: QuotaSettings) -> list[EntityChange]:
    """Each entity whose quota values differ between `old` and `new`, in entity-path order, its values
    in `QUOTA_TYPES` order. Windows, algorithms and pools are not entity values: `describe_changes`
    names them."""
    def values(settings: QuotaSettings, spec: EntitySpec) -> dict[str, float]:
        held = settings.entities.get(spec, {})
        return {str(key): held[key] for key in QUOTA_TYPES if key in held}

    changes: list[EntityChange] = []
    for spec in sorted(set(old.entities) | set(new.entities), key=lambda e: e.path):
        before, after = values(old, spec), values(new, spec)
        if before != after:
            changes.append(EntityChange(spec, before, after))
    return changes
