"""What a live reload changed in the quota settings, as lines for the log.

An operator who edits kqp.yaml and reloads wants to see that the edit took, and nothing else
changed by accident: one line per entity whose quotas were added, removed or changed, in Kafka's
entity-path vocabulary, plus a line for each window setting that moved (a new window changes every
measured rate). Pure: the reload driver decides when to call it and where the lines go.
"""

from __future__ import annotations

from collections.abc import Mapping

from kqp.quotas.model import EntitySpec, QuotaSettings


def _number(value: float) -> str:
    # 1048576.0 reads better as 1048576; a fraction keeps every digit it has.
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _values(values: Mapping[str, float]) -> str:
    return ", ".join(f"{name}={_number(value)}" for name, value in values.items())


def _changes(old: Mapping[str, float], new: Mapping[str, float]) -> str:
    parts = []
    for name in [*old, *(name for name in new if name not in old)]:
        before, after = old.get(name), new.get(name)
        if before != after:
            shown_before = "unset" if before is None else _number(before)
            shown_after = "unset" if after is None else _number(after)
            parts.append(f"{name} {shown_before} -> {shown_after}")
    return ", ".join(parts)


def _order(entity: EntitySpec) -> tuple[str, str]:
    return (entity.user or "", entity.client_id or "")


def diff_quota_settings(old: QuotaSettings, new: QuotaSettings) -> list[str]:
    """One line per changed window setting, then one per entity added, removed or changed."""
    lines = []
    for setting in ("window_size_seconds", "window_count"):
        before, after = getattr(old, setting), getattr(new, setting)
        if before != after:
            lines.append(f"quota {setting} changed: {_number(before)} -> {_number(after)}")
    for entity in sorted({*old.entities, *new.entities}, key=_order):
        before, after = old.entities.get(entity), new.entities.get(entity)
        name = entity.path
        if before is None and after is not None:
            lines.append(f"quota added for {name}: {_values(after)}")
        elif after is None and before is not None:
            lines.append(f"quota removed for {name}: {_values(before)}")
        elif before is not None and after is not None and dict(before) != dict(after):
            lines.append(f"quota changed for {name}: {_changes(before, after)}")
    return lines
