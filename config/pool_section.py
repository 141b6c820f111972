"""``quotas.pools``: capacity pools, and the pool keys of an entity entry.

A pool names a budget per quota type, its members (selectors on the principal), optionally the
topics whose bytes it covers (a topic pool), an adaptive budget (``adaptive: {target_latency_ms,
min_budget}``), service classes, highest first (``classes: [{name, members, max_share,
burst_seconds}]``, members by the same selectors; only the last may leave them out), and a ``mode``
(observe or enforce; default ``quotas.mode``). An entity entry may carry `weight` (default 1),
`min_share` and `max_share` (fractions of a pool's budget, 0..1), with or without quota values of its
own: an entry with only these, or with nothing but its names, names a pool member. Shares are
fractions rather than rates because a pool's budget changes and a member's guarantee should follow it.

Every refusal names its key, as the rest of config/ does; the rules that involve two pools (one
principal in two pools for one type) are pools/spec.py's, reported here with both pools' paths.
"""

from __future__ import annotations

from collections.abc import Mapping

from kqp.config.errors import ConfigError, shown
from kqp.config.schema import child, choice, did_you_mean, name, number
from kqp.quotas.model import MODES, EntitySpec, QuotaType
from kqp.quotas.pools.spec import (
    POOL_TYPES,
    REFUSED,
    TOPIC_POOL_TYPES,
    AdaptiveSpec,
    MemberSelector,
    MemberShare,
    PoolSpec,
    ServiceClass,
    pool_conflict,
    topic_pattern_error,
)

SELECTOR_KEYS = ("user", "client_id", "client_id_prefix")
SHARE_KEYS = ("weight", "min_share", "max_share")
_POOL_KEYS = ("name", "members", "topics", "adaptive", "mode", "classes", *POOL_TYPES)
_ADAPTIVE_KEYS = ("target_latency_ms", "min_budget")
_CLASS_KEYS = ("name", "members", "max_share", "burst_seconds")
_fraction = number(minimum=0)
_budget = number(above=0)


def share_value(key: str, value: object, path: str) -> float:
    """One of an entity entry's `weight`, `min_share`, `max_share`."""
    if key == "weight":
        return number(above=0, note="a member's weight in its pools; 0 would starve it")(value, path)
    fraction = _fraction(value, path)
    if fraction > 1:
        raise ConfigError(path, f"must be a fraction of the pool's budget, 0..1, got {shown(value)}")
    return fraction


def member_share(values: Mapping[str, float], path: str) -> MemberShare:
    try:
        return MemberShare(**values)
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None


def _mapping(value: object, path: str, what: str) -> Mapping[object, object]:
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a mapping ({what}), got {shown(value)}")
    return value


def _selector(entry: object, path: str) -> MemberSelector:
    parts: dict[str, str] = {}
    for key, value in _mapping(entry, path, "user, client_id or client_id_prefix").items():
        if key not in SELECTOR_KEYS:
            raise ConfigError(child(path, key), f"unknown key; {did_you_mean(key, SELECTOR_KEYS)}")
        parts[str(key)] = name(value, child(path, key))
    if not parts:
        raise ConfigError(path, "selects nothing; give a user, a client_id or a client_id_prefix")
    try:
        return MemberSelector(**parts)
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None


def _list(value: object, path: str, what: str) -> list[object]:
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(path, f"must be a non-empty list of {what}, got {shown(value)}")
    return list(value)


def _topics(value: object, path: str) -> tuple[str, ...]:
    out: list[str] = []
    for i, item in enumerate(_list(value, path, "topic names or patterns")):
        pattern = name(item, f"{path}[{i}]")
        error = topic_pattern_error(pattern)
        if error:
            raise ConfigError(f"{path}[{i}]", f"{error}, got {shown(item)}")
        out.append(pattern)
    return tuple(dict.fromkeys(out))


def _adaptive(value: object, path: str, budgets: Mapping[str, float]) -> AdaptiveSpec:
    fields = _mapping(value, path, "target_latency_ms and an optional min_budget")
    for key in fields:
        if key not in _ADAPTIVE_KEYS:
            raise ConfigError(child(path, key), f"unknown key; {did_you_mean(key, _ADAPTIVE_KEYS)}")
    if "target_latency_ms" not in fields:
        raise ConfigError(path, "needs target_latency_ms, e.g. {target_latency_ms: 100}")
    target = number(above=0)(fields["target_latency_ms"], child(path, "target_latency_ms"))
    floors: dict[str, float] = {}
    where = child(path, "min_budget")
    raw = fields.get("min_budget")
    if isinstance(raw, Mapping):
        for key, floor in raw.items():
            if key not in budgets:
                raise ConfigError(child(where, key), f"not a budget of this pool; {did_you_mean(key, budgets)}")
            floors[str(key)] = number(minimum=0)(floor, child(where, key))
    elif raw is not None:
        if len(budgets) != 1:
            raise ConfigError(where, "the pool has several budgets: give min_budget per quota type, e.g. "
                                     "{producer_byte_rate: 100000}")
        floors[next(iter(budgets))] = number(minimum=0)(raw, where)
    for key, floor in floors.items():
        if floor > budgets[key]:
            raise ConfigError(where, f"{key} floor {floor:g} is above the pool's budget {budgets[key]:g}")
    return AdaptiveSpec(target, floors)


def _class(entry: object, path: str, last: bool) -> ServiceClass:
    fields = _mapping(entry, path, "a class: name, members, max_share, burst_seconds")
    for key in fields:
        if key not in _CLASS_KEYS:
            raise ConfigError(child(path, key), f"unknown key; {did_you_mean(key, _CLASS_KEYS)}")
    if "name" not in fields:
        raise ConfigError(path, "needs a name")
    class_name = name(fields["name"], child(path, "name"))
    members: tuple[MemberSelector, ...] = ()
    if "members" in fields:
        where = child(path, "members")
        members = tuple(_selector(s, f"{where}[{i}]") for i, s in enumerate(_list(fields["members"], where,
                                                                                  "member selectors")))
    elif not last:
        raise ConfigError(path, f"class {class_name} has no members; only the last class may leave them out (it "
                                "takes every member the classes above do not)")
    max_share = 1.0
    if "max_share" in fields:
        max_share = number(above=0, note="the most the class takes of the budget")(fields["max_share"],
                                                                                   child(path, "max_share"))
        if max_share > 1:
            raise ConfigError(child(path, "max_share"), f"must be a fraction of the pool's budget, 0..1, got "
                                                        f"{shown(fields['max_share'])}")
    burst = number(minimum=0)(fields["burst_seconds"], child(path, "burst_seconds")) if "burst_seconds" in fields \
        else 0.0
    if burst and last:
        raise ConfigError(child(path, "burst_seconds"), f"class {class_name} is the lowest: what a class bursts "
                          "above its quota is taken back from the classes below it, and none is")
    return ServiceClass(class_name, members, max_share, burst)


def _classes(value: object, path: str, pool_members: tuple[MemberSelector, ...]) -> tuple[ServiceClass, ...]:
    """`classes:` of a pool, highest first: unique names, no principal in two, none outside the pool."""
    items = _list(value, path, "classes")
    classes = tuple(_class(entry, f"{path}[{i}]", i == len(items) - 1) for i, entry in enumerate(items))
    for j, later in enumerate(classes):
        for i, earlier in enumerate(classes[:j]):
            if earlier.name == later.name:
                raise ConfigError(f"{path}[{j}].name", f"class {later.name} is already {path}[{i}]")
        for k, selector in enumerate(later.members):
            where = f"{path}[{j}].members[{k}]"
            if pool_members and not any(selector.overlaps(m) for m in pool_members):
                raise ConfigError(where, f"{selector.shown} selects no member of the pool; class members are pool "
                                         "members")
            for i, earlier in enumerate(classes[:j]):
                if any(selector.overlaps(e) for e in earlier.members):
                    raise ConfigError(where, f"{selector.shown} could take a principal that class {earlier.name} "
                                             f"({path}[{i}]) takes too; a member is in one class")
    return classes


def _pool(entry: object, path: str) -> PoolSpec:
    fields = _mapping(entry, path, "a pool: name, budgets, members")
    budgets: dict[str, float] = {}
    for key, value in fields.items():
        if key in REFUSED:
            raise ConfigError(child(path, key), f"cannot be pooled: {REFUSED[key]}")
        if key not in _POOL_KEYS:
            raise ConfigError(child(path, key), f"unknown key; {did_you_mean(key, _POOL_KEYS)}")
        if key in POOL_TYPES:
            budgets[QuotaType(key)] = _budget(value, child(path, key))
    if "name" not in fields:
        raise ConfigError(path, "needs a name")
    pool_name = name(fields["name"], child(path, "name"))
    if not budgets:
        raise ConfigError(path, f"pool {pool_name} has no budget; give one or more of {', '.join(POOL_TYPES)}")
    topics = _topics(fields["topics"], child(path, "topics")) if "topics" in fields else ()
    if topics:
        for key in budgets:
            if key not in TOPIC_POOL_TYPES:
                raise ConfigError(child(path, key), "a topic pool divides the bytes of its topics: only "
                                                    f"{' and '.join(TOPIC_POOL_TYPES)} (a request's other rates "
                                                    "are not per topic)")
    members: tuple[MemberSelector, ...] = ()
    if "members" in fields:
        where = child(path, "members")
        members = tuple(_selector(s, f"{where}[{i}]") for i, s in enumerate(_list(fields["members"], where,
                                                                                  "member selectors")))
    elif not topics:
        raise ConfigError(path, f"pool {pool_name} has no members; add members: [{{client_id_prefix: ...}}] "
                                "(only a topic pool may leave them out, to take everyone)")
    adaptive = None if fields.get("adaptive") is None else _adaptive(fields["adaptive"], child(path, "adaptive"),
                                                                     budgets)
    if adaptive is not None and topics:
        raise ConfigError(child(path, "adaptive"), "applies to a pool of members (their requests' latency), not to "
                                                   "a topic pool; make the pool's members a principal pool")
    mode = None if fields.get("mode") is None else choice(*MODES)(fields["mode"], child(path, "mode"))
    classes = _classes(fields["classes"], child(path, "classes"), members) if "classes" in fields else ()
    return PoolSpec(pool_name, budgets, members, topics, adaptive, mode, classes)


def pools_from(value: object, path: str) -> tuple[PoolSpec, ...]:
    """The `pools:` list (absent: none)."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ConfigError(path, f"must be a list of pools, got {shown(value)}")
    pools = tuple(_pool(entry, f"{path}[{i}]") for i, entry in enumerate(value))
    seen: dict[str, int] = {}
    for i, pool in enumerate(pools):
        if pool.name in seen:
            raise ConfigError(f"{path}[{i}].name", f"pool {pool.name} is already {path}[{seen[pool.name]}]")
        seen[pool.name] = i
    conflict = pool_conflict(pools)
    if conflict is not None:
        i, j, quota_type = conflict
        what = "a topic's bytes" if pools[i].topics else "a principal"
        raise ConfigError(f"{path}[{j}]", f"pool {pools[j].name} and pool {pools[i].name} ({path}[{i}]) could "
                                          f"both take {what} for {quota_type}: in at most one pool per quota "
                                          "type; narrow the members (or topics), or budget other types")
    return pools


def check_member_classes(pools: tuple[PoolSpec, ...], quotas: Mapping[EntitySpec, Mapping[str, float]],
                         shares: Mapping[EntitySpec, MemberShare], paths: Mapping[EntitySpec, str]) -> None:
    """Each entry that names one member of a pool with classes keeps that member in one class: it may
    not take principals that a class takes and others it does not, unless a more specific entry of
    the same user takes every one of them first (Kafka's precedence: an exact client id, a longer
    prefix). A `<default>` name is one member per name, never split by it."""
    for pool in pools:
        if not pool.classes:
            continue
        counting = [e for e in paths if e in shares or any(t in quotas.get(e, {}) for t in pool.budgets)]
        for entity in counting:
            found = pool.class_split(entity.user, entity.client_id, entity.client_id_prefix)
            if found is None or any(_takes_first(other, entity, found[1]) for other in counting):
                continue
            service_class, selector = found
            raise ConfigError(paths[entity], f"{entity.path} is one member of pool {pool.name}, but class "
                              f"{service_class.name} takes only some of its principals ({selector.shown}): a member "
                              "is in one class; give those principals an entry of their own, or narrow the entry")


def _takes_first(other: EntitySpec, entity: EntitySpec, selector: MemberSelector) -> bool:
    """Whether `other` comes before `entity` for every principal that `entity` and `selector` share."""
    if other == entity or other.user != entity.user or entity.client_id is not None:
        return False
    if selector.client_id is not None:
        wanted = selector.client_id
        return other.client_id == wanted or (other.client_id_prefix is not None and wanted.startswith(
            other.client_id_prefix) and len(other.client_id_prefix) > len(entity.client_id_prefix or ""))
    if selector.client_id_prefix is None or other.client_id_prefix is None:
        return False
    narrowest = max(selector.client_id_prefix, entity.client_id_prefix or "", key=len)
    return narrowest.startswith(other.client_id_prefix) and len(other.client_id_prefix) > len(
        entity.client_id_prefix or "")


def pool_document(pool: PoolSpec) -> dict[str, object]:
    """A pool as the file writes it (what :func:`pools_from` reads back)."""
    out: dict[str, object] = {"name": pool.name, **{str(k): v for k, v in pool.budgets.items()}}
    if pool.members:
        out["members"] = [{k: getattr(s, k) for k in SELECTOR_KEYS if getattr(s, k) is not None}
                          for s in pool.members]
    if pool.topics:
        out["topics"] = list(pool.topics)
    if pool.adaptive is not None:
        adaptive: dict[str, object] = {"target_latency_ms": pool.adaptive.target_latency_ms}
        if pool.adaptive.min_budget:
            adaptive["min_budget"] = {str(k): v for k, v in pool.adaptive.min_budget.items()}
        out["adaptive"] = adaptive
    if pool.mode is not None:
        out["mode"] = pool.mode
    if pool.classes:
        out["classes"] = [_class_document(c) for c in pool.classes]
    return out


def _class_document(service_class: ServiceClass) -> dict[str, object]:
    out: dict[str, object] = {"name": service_class.name}
    if service_class.members:
        out["members"] = [{k: getattr(s, k) for k in SELECTOR_KEYS if getattr(s, k) is not None}
                          for s in service_class.members]
    if service_class.max_share != 1:
        out["max_share"] = service_class.max_share
    if service_class.burst_seconds:
        out["burst_seconds"] = service_class.burst_seconds
    return out


def share_document(share: MemberShare) -> dict[str, float]:
    """An entry's pool keys; weight always, so that the entry still names a member when read back."""
    out = {"weight": share.weight}
    if share.min_share:
        out["min_share"] = share.min_share
    if share.max_share != 1:
        out["max_share"] = share.max_share
    return out
