"""The ``quotas:`` section: window settings and per-entity quota values, as QuotaSettings.

Kept apart from the loader because live reload re-reads only this section
(:func:`quota_settings_from`), and because its rules are the quota layer's vocabulary: the entity
``<user, client-id>`` with ``<default>`` placeholders, client-id prefixes, and the quota types of
KIP-13, KIP-124, KIP-599 and KIP-731. An entry names its entity and carries its values side by
side, with an optional ``algorithm`` and ``mode`` (observe or enforce) for its own quotas.

`pools:` (pool_section.py) is read here too: an entry that sets no quota is only meaningful as a
pool member, so whether one is allowed depends on the pools.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kqp.config.errors import ConfigError, shown
from kqp.config.fleet_section import FLEET_FIELDS, fleet_config, fleet_document
from kqp.config.model import FleetConfig
from kqp.config.pool_section import (
    SHARE_KEYS,
    check_member_classes,
    member_share,
    pool_document,
    pools_from,
    share_document,
    share_value,
)
from kqp.config.schema import Field, child, choice, did_you_mean, integer, name, number, read_section
from kqp.quotas.model import (
    ALGORITHMS,
    DEFAULT,
    ENFORCE,
    MODES,
    QUOTA_TYPES,
    SAMPLED,
    STEADY,
    EntitySpec,
    QuotaSettings,
    QuotaType,
)
from kqp.quotas.pools.spec import MemberShare, PoolSpec

_ENTITY_KEYS = ("user", "client_id", "client_id_prefix")
_algorithm = choice(*ALGORITHMS)
_mode = choice(*MODES)


def _on_off(value: object, path: str) -> bool:
    """YAML's on/off (read as true/false), or the words in quotes."""
    if isinstance(value, bool):
        return value
    if value in ("on", "off"):
        return value == "on"
    raise ConfigError(path, f"must be on or off, got {shown(value)}")

# KIP-124: request_percentage is a percent of one thread, so 0 would forbid all work and values
# above 100 (more than one thread's worth) are meaningful. Every other quota is a rate where 0 is
# a legitimate "block this entity" setting, as in Kafka.
_QUOTA_CHECKS = {
    quota_type: number(above=0, note="percent of one thread; may exceed 100")
    if quota_type is QuotaType.REQUEST_PERCENTAGE
    else number(minimum=0)
    for quota_type in QUOTA_TYPES
}


# entity, its quota values, its algorithm, its mode, its pool share (None: not a pool member entry)
Entry = tuple[EntitySpec, dict[str, float], str | None, str | None, MemberShare | None]


def _entity_entry(entry: object, path: str) -> Entry:
    if not isinstance(entry, Mapping):
        raise ConfigError(path, f"must be a mapping with user and/or client_id and quota values, got {shown(entry)}")
    ids: dict[str, str | None] = {key: None for key in _ENTITY_KEYS}
    values: dict[str, float] = {}
    shares: dict[str, float] = {}
    algorithm: str | None = None
    mode: str | None = None
    for key, value in entry.items():
        key_path = child(path, key)
        if key in _ENTITY_KEYS:
            # An explicit empty `user:` is refused rather than read as "omitted": omitting the
            # user selects a different entity (/clients/x, not /users/<default>/clients/x).
            ids[key] = name(value, key_path)
        elif key in _QUOTA_CHECKS:
            values[key] = _QUOTA_CHECKS[key](value, key_path)
        elif key == "algorithm":
            algorithm = _algorithm(value, key_path)
        elif key == "mode":
            mode = _mode(value, key_path)
        elif key in SHARE_KEYS:
            shares[key] = share_value(key, value, key_path)
        else:
            known = (*_ENTITY_KEYS, "algorithm", "mode", *SHARE_KEYS, *QUOTA_TYPES)
            raise ConfigError(key_path, f"unknown key; {did_you_mean(key, known)}")
    prefix = ids["client_id_prefix"]
    if prefix is not None and ids["client_id"] is not None:
        raise ConfigError(path, "has both client_id and client_id_prefix; an entry names one client id or one "
                                "prefix group (write two entries for both)")
    if prefix == DEFAULT:
        raise ConfigError(child(path, "client_id_prefix"), "must be a literal prefix; for every client id "
                                                           "write client_id: '<default>'")
    if ids["user"] is None and ids["client_id"] is None and prefix is None:
        raise ConfigError(path, "needs a user, a client_id or both (a name or '<default>'), or a client_id_prefix")
    if algorithm is not None and not values:
        raise ConfigError(child(path, "algorithm"), "applies to the entry's own quotas, and it sets none (a pool "
                                                    "member measures with quotas.algorithm)")
    if mode is not None and not values:
        raise ConfigError(child(path, "mode"), "applies to the entry's own quotas, and it sets none (a pool "
                                               "member's throttles follow its pool's mode)")
    # An entry with no quota of its own names a pool member, with its share or the default one.
    share = member_share(shares, path) if shares or not values else None
    return EntitySpec(ids["user"], ids["client_id"], prefix), values, algorithm, mode, share


Entities = tuple[Mapping[EntitySpec, Mapping[str, float]], Mapping[EntitySpec, str], Mapping[EntitySpec, str],
                 Mapping[EntitySpec, MemberShare], dict[EntitySpec, str], dict[EntitySpec, str]]


def _entities(value: object, path: str) -> Entities:
    """The entity entries: each entity's quota values, the algorithm and the mode of those that name
    one, the pool share of those that name a pool member, and the path of each pool member entry and
    of every entry (for errors)."""
    if value is None:
        value = []
    if not isinstance(value, list | tuple):
        raise ConfigError(path, f"must be a list of entity entries, got {shown(value)}")
    entities: dict[EntitySpec, Mapping[str, float]] = {}
    algorithms: dict[EntitySpec, str] = {}
    modes: dict[EntitySpec, str] = {}
    shares: dict[EntitySpec, MemberShare] = {}
    member_paths: dict[EntitySpec, str] = {}
    paths: dict[EntitySpec, str] = {}
    first_index: dict[EntitySpec, int] = {}
    for index, entry in enumerate(value):
        entry_path = f"{path}[{index}]"
        entity, values, algorithm, mode, share = _entity_entry(entry, entry_path)
        if entity in first_index:
            # Merging two entries silently would hide a typo or a copy-paste; say where both are.
            raise ConfigError(
                entry_path,
                f"same entity {entity.path} as {path}[{first_index[entity]}]; merge the two entries",
            )
        first_index[entity] = index
        paths[entity] = entry_path
        if values:
            entities[entity] = MappingProxyType(values)
        if algorithm is not None:
            algorithms[entity] = algorithm
        if mode is not None:
            modes[entity] = mode
        if share is not None:
            shares[entity] = share
            member_paths[entity] = entry_path
    return (MappingProxyType(entities), MappingProxyType(algorithms), MappingProxyType(modes), MappingProxyType(shares),
            member_paths, paths)


QUOTA_FIELDS = {
    "window_size_seconds": Field(number(above=0), 1),  # quota.window.size.seconds
    "window_count": Field(integer(minimum=2), 11),  # quota.window.num
    "algorithm": Field(_algorithm, STEADY),  # every entity's, unless its entry names one
    "mode": Field(_mode, ENFORCE),  # every entity's and pool's, unless its entry names one
    "entities": Field(_entities, []),
    "pools": Field(pools_from, []),  # capacity pools (pool_section.py)
    "pacing": Field(_on_off, True),  # pace clients that do not back off (off: the broker's mutes)
    **FLEET_FIELDS,  # scope and cluster: where usage is shared (fleet_section.py)
}


def quota_settings_from(data: object, *, path: str = "quotas", source: str | None = None) -> QuotaSettings:
    """Build QuotaSettings from the ``quotas:`` section alone (None reads as an empty section).

    Errors name keys under ``path``, so a reload that re-reads the same file reports the same
    ``quotas.entities[1]...`` paths as the first load.
    """
    return quota_section(data, path=path, source=source)[0]


def quota_section(data: object, *, path: str = "quotas",
                  source: str | None = None) -> tuple[QuotaSettings, FleetConfig]:
    """The whole ``quotas:`` section: the quota values, and where their usage is shared."""
    try:
        values = read_section(data, path, QUOTA_FIELDS)
        fleet = fleet_config(values["scope"], values["cluster"], path)
        entities, algorithms, modes, shares, member_paths, paths = values["entities"]
        _check_adaptive_algorithm(data, values["pools"], path)
        check_member_classes(values["pools"], entities, shares, paths)
        if member_paths and not values["pools"]:
            entity, where = next(iter(member_paths.items()))
            if entity not in entities and shares[entity] == MemberShare():
                raise ConfigError(where, "sets no quota; add one, e.g. producer_byte_rate: 1048576")
            raise ConfigError(where, "has weight, min_share or max_share, which only pool members have, but "
                                     "quotas.pools is empty")
    except ConfigError as exc:
        raise exc.with_source(source) from None
    settings = QuotaSettings(
        window_size_seconds=values["window_size_seconds"],
        window_count=values["window_count"],
        entities=entities,
        algorithm=values["algorithm"],
        algorithms=algorithms,
        mode=values["mode"],
        modes=modes,
        pools=values["pools"],
        shares=shares,
        pacing=values["pacing"],
    )
    return settings, fleet


def _check_adaptive_algorithm(data: object, pools: tuple[PoolSpec, ...], path: str) -> None:
    """An adaptive pool's members measure with a token bucket whatever quotas.algorithm says
    (quotas/pools/ledger.py): a `sampled` written out would be silently overridden for them."""
    adaptive = next((pool.name for pool in pools if pool.adaptive is not None), None)
    if adaptive is not None and isinstance(data, Mapping) and data.get("algorithm") == SAMPLED:
        raise ConfigError(child(path, "algorithm"), f"sampled, but the members of adaptive pool {adaptive} "
                          "measure with a token bucket (Kafka's sampled rate lets a span's unused quota through "
                          "at once, which overruns a budget held near the upstream's capacity); leave "
                          "algorithm out (entity quotas then measure with the default, steady) or set "
                          "token_bucket")


def quota_document(settings: QuotaSettings, fleet: FleetConfig | None = None) -> dict[str, object]:
    """The ``quotas:`` section that :func:`quota_section` reads back as ``settings`` (and ``fleet``)."""
    entries: list[dict[str, object]] = []
    for entity in dict.fromkeys([*settings.entities, *settings.shares]):
        values = settings.entities.get(entity, {})
        entry: dict[str, object] = {
            key: getattr(entity, key) for key in _ENTITY_KEYS if getattr(entity, key) is not None
        }
        if entity in settings.algorithms:
            entry["algorithm"] = settings.algorithms[entity]
        if entity in settings.modes:
            entry["mode"] = settings.modes[entity]
        if entity in settings.shares and (values or settings.shares[entity] != MemberShare()):
            entry.update(share_document(settings.shares[entity]))
        entry.update((str(key), value) for key, value in values.items())   # plain text keys for yaml
        entries.append(entry)
    document: dict[str, object] = {
        "window_size_seconds": settings.window_size_seconds,
        "window_count": settings.window_count,
        "pacing": "on" if settings.pacing else "off",
        "mode": settings.mode,
        "entities": entries,
    }
    if settings.algorithm != STEADY:   # the default goes unwritten
        document["algorithm"] = settings.algorithm
    if settings.pools:
        document["pools"] = [pool_document(pool) for pool in settings.pools]
    if fleet is not None:
        document.update(fleet_document(fleet))
    return document
