"""Immutable quota settings and the names the quota layer shares with the rest of kqp.

`kqp.config` builds a :class:`QuotaSettings` from YAML; `kqp.proxy` names who sent a request
with a :class:`Principal`; the quota manager charges each request to a :class:`QuotaKey`. These
are plain frozen values so a reload can build new settings off to the side and swap them in whole,
and so the module stays import-light (config imports it without pulling in any quota machinery).

The vocabulary is Kafka's: an entity is a `<user, client-id>` pair where either component may be
omitted (``None``) or be the ``<default>`` placeholder, exactly the config nodes
``/users/<user>/clients/<client-id>`` that `kafka-configs.sh` writes. kqp adds one kind Kafka does
not have: a client-id prefix (``/users/<user>/client-id-prefixes/<prefix>``, or
``/client-id-prefixes/<prefix>`` without a user) that every client id starting with the prefix shares
as one group; entities.py says where it sits in Kafka's precedence.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kqp.quotas.pools.spec import MemberShare, PoolSpec, pool_conflict

ANONYMOUS = "ANONYMOUS"  # Kafka's principal name for an unauthenticated connection
DEFAULT = "<default>"  # Kafka's placeholder entity name (ZooKeeperInternals.DEFAULT_STRING)


class QuotaType(enum.StrEnum):
    """What a quota measures, under the names Kafka's configs use. A `StrEnum`, so a member equals
    (and hashes as) its YAML key and metric label: settings parsed from text and code naming a type
    meet in the same dicts."""

    PRODUCER_BYTE_RATE = "producer_byte_rate"              # KIP-13
    CONSUMER_BYTE_RATE = "consumer_byte_rate"              # KIP-13
    REQUEST_PERCENTAGE = "request_percentage"              # KIP-124 (accepted): percent of one thread
    REQUEST_RATE = "request_rate"                          # KIP-124 (draft): requests per second
    CONTROLLER_MUTATION_RATE = "controller_mutation_rate"  # KIP-599: partition mutations per second
    PRODUCER_RECORD_RATE = "producer_record_rate"          # KIP-731 vocabulary, enforced at the proxy
    PRODUCER_BATCH_RATE = "producer_batch_rate"
    CONSUMER_RECORD_RATE = "consumer_record_rate"
    CONSUMER_BATCH_RATE = "consumer_batch_rate"


QUOTA_TYPES: tuple[QuotaType, ...] = tuple(QuotaType)
#: The mutation quota, by a module name: read on hot paths, where an Enum member looked up on its
#: class is a Python call (3.11).
MUTATION = QuotaType.CONTROLLER_MUTATION_RATE


class ChargeKind(enum.IntEnum):
    """What one charge is for: a Produce request, a Fetch response, any request. An `IntEnum`, so a
    kind indexes the per-kind tuples (flags, caches) at the cost of a tuple index."""

    PRODUCE = 0
    FETCH = 1
    REQUEST = 2

    @property
    def types(self) -> tuple[tuple[QuotaType, int], ...]:
        """The rate quota types a charge of this kind counts in, each with the index of the value it
        measures in the charge's values: (bytes, records, batches) for PRODUCE and FETCH, (1,) for
        REQUEST (`request_percentage` measures handler time, not a value of the charge)."""
        return _CHARGED[self]


_CHARGED: tuple[tuple[tuple[QuotaType, int], ...], ...] = (
    ((QuotaType.PRODUCER_BYTE_RATE, 0), (QuotaType.PRODUCER_RECORD_RATE, 1), (QuotaType.PRODUCER_BATCH_RATE, 2)),
    ((QuotaType.CONSUMER_BYTE_RATE, 0), (QuotaType.CONSUMER_RECORD_RATE, 1), (QuotaType.CONSUMER_BATCH_RATE, 2)),
    ((QuotaType.REQUEST_RATE, 0),),
)

# How a quota measures use (README "Quota algorithms"): the quota held steady after Kafka's first
# allowance (the config file's default), Kafka's sampled rate, or KIP-599's token bucket.
STEADY = "steady"
SAMPLED = "sampled"
TOKEN_BUCKET = "token_bucket"
ALGORITHMS: tuple[str, ...] = (STEADY, SAMPLED, TOKEN_BUCKET)
BUCKETS = frozenset({STEADY, TOKEN_BUCKET})   # the algorithms that measure with a token bucket
# What a quota's throttles do (README "Rolling out quotas"): throttle clients, or only be counted.
ENFORCE = "enforce"
OBSERVE = "observe"
MODES: tuple[str, ...] = (ENFORCE, OBSERVE)


@dataclass(frozen=True, slots=True)
class EntitySpec:
    """One configured quota entity; ``None`` omits a component, ``"<default>"`` is the default.

    ``client_id_prefix`` (exclusive with ``client_id``) names a group: every client id that starts
    with it, sharing one quota. It is a literal prefix, never ``<default>`` (that is ``client_id``'s).
    """

    user: str | None
    client_id: str | None
    client_id_prefix: str | None = None

    def __post_init__(self) -> None:
        if self.client_id_prefix is not None:
            if self.client_id is not None:
                raise ValueError("a quota entity has a client id or a client id prefix, not both")
            if self.client_id_prefix in ("", DEFAULT):
                raise ValueError("a client id prefix must be a non-empty literal prefix, not '' or <default>")
        elif self.user is None and self.client_id is None:
            raise ValueError("a quota entity needs a user, a client id (or prefix) or both")
        # An empty name would collide with the "" that QuotaKey uses for "shared by all clients".
        if self.user == "" or self.client_id == "":
            raise ValueError("entity names must not be empty; use None to omit a component")

    @property
    def path(self) -> str:
        """Kafka's config node name, e.g. ``/users/alice/clients/<default>``; a prefix entity's is
        ``/users/alice/client-id-prefixes/spark-job-42-`` (kqp's own node kind)."""
        user = "" if self.user is None else f"/users/{self.user}"
        if self.client_id_prefix is not None:
            return f"{user}/client-id-prefixes/{self.client_id_prefix}"
        client = "" if self.client_id is None else f"/clients/{self.client_id}"
        return user + client


@dataclass(frozen=True, slots=True)
class Principal:
    """Who sent a request: the (possibly ``ANONYMOUS``) user and the header's client id."""

    user: str
    client_id: str


@dataclass(frozen=True, slots=True)
class QuotaKey:
    """Kafka's quota metric tags: which sensor a request is charged to.

    ``client_id == ""`` means the sensor is shared by all of the user's clients (a match on
    ``/users/u`` or ``/users/<default>``); ``user == ""`` means it is shared by every user of the
    client id (a match on ``/clients/c`` or ``/clients/<default>``). See `entities.resolve`.

    ``client_id_prefix`` set means a prefix group's sensor, shared by every client id with that
    prefix (of the user, or of every user when ``user == ""``); ``client_id`` is then "". A separate
    field, because a client id may contain any character: no spelling of the prefix inside
    ``client_id`` could be told apart from a real client id.
    """

    user: str
    client_id: str
    client_id_prefix: str | None = None


def _freeze(entities: Mapping[EntitySpec, Mapping[str, float]]) -> Mapping[EntitySpec, Mapping[str, float]]:
    frozen: dict[EntitySpec, Mapping[str, float]] = {}
    for spec, values in entities.items():
        if not isinstance(spec, EntitySpec):
            raise TypeError(f"entity keys must be EntitySpec, got {spec!r}")
        checked: dict[str, float] = {}   # keyed by QuotaType members (a StrEnum)
        for quota_type, value in values.items():
            if quota_type not in QUOTA_TYPES:
                raise ValueError(f"{spec.path}: unknown quota type {quota_type!r}")
            value = float(value)
            # Kafka refuses negative or non-finite quotas; 0 is accepted here and means "block"
            # (see rates/sensor.py for what a zero quota does).
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{spec.path}: {quota_type} must be a finite number >= 0, got {value}")
            checked[QuotaType(quota_type)] = value
        frozen[spec] = MappingProxyType(checked)
    return MappingProxyType(frozen)


def _check_pools(pools: tuple[PoolSpec, ...], shares: Mapping[EntitySpec, MemberShare]) -> None:
    names = [pool.name for pool in pools]
    if len(set(names)) != len(names):
        raise ValueError(f"pool names must be unique, got {names}")
    conflict = pool_conflict(tuple(pools))
    if conflict is not None:
        i, j, quota_type = conflict
        raise ValueError(f"pools {names[i]} and {names[j]} could both charge one request's {quota_type}")
    for spec, share in shares.items():
        if not isinstance(spec, EntitySpec) or not isinstance(share, MemberShare):
            raise TypeError(f"shares map EntitySpec to MemberShare, got {spec!r}: {share!r}")


@dataclass(frozen=True)
class QuotaSettings:
    """Everything the quota layer needs from the config file, frozen.

    ``window_size_seconds`` and ``window_count`` are Kafka's ``quota.window.size.seconds`` and
    ``quota.window.num``. ``algorithm`` is how every quota measures use unless ``algorithms`` names
    another for an entity (controller_mutation_rate is a token bucket whatever they say, KIP-599);
    built here it defaults to Kafka's sampled rate, read from a config file to `steady`.
    ``mode`` likewise, unless ``modes`` (or a pool's own ``mode``) names another: an observed quota
    is measured and charged as if enforced, and its throttles are only counted.
    A reload builds a new instance; the per-type index, the prefix index and the resolution cache
    live on the instance, so replacing the settings is what invalidates the cache. `pools` and
    `shares` are the capacity pools (pools/spec.py); the quota manager hands them to pools/pool_set.py.
    """

    window_size_seconds: float = 1.0
    window_count: int = 11
    entities: Mapping[EntitySpec, Mapping[str, float]] = field(default_factory=dict)
    algorithm: str = SAMPLED
    algorithms: Mapping[EntitySpec, str] = field(default_factory=dict)
    # Capacity pools (pools/spec.py), and how entities take part in them: an entity in `shares` names
    # a pool member for every pooled type, whether or not it sets a quota itself.
    pools: tuple[PoolSpec, ...] = ()
    shares: Mapping[EntitySpec, MemberShare] = field(default_factory=dict)
    # quotas.pacing: the proxy mutes clients that do not back off for their requests' own
    # cost (`Violation.pace_seconds`) rather than the whole throttle; False is the broker's behaviour.
    pacing: bool = True
    mode: str = ENFORCE
    modes: Mapping[EntitySpec, str] = field(default_factory=dict)
    # quota type -> {entity: limit}; derived once so resolution does a handful of dict lookups.
    by_type: Mapping[str, Mapping[EntitySpec, float]] = field(init=False, repr=False, compare=False)
    # entity user (a name, <default> or None) -> (prefix lengths, longest first; the prefixes).
    prefixes: Mapping[str | None, tuple[tuple[int, ...], frozenset[str]]] = field(
        init=False, repr=False, compare=False)
    # Principal -> {quota type: resolution}; filled and bounded by entities.py.
    resolution_cache: dict[Principal, dict[str, Any]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window_size_seconds) and self.window_size_seconds > 0):
            raise ValueError(f"window_size_seconds must be > 0, got {self.window_size_seconds}")
        if int(self.window_count) != self.window_count or self.window_count < 1:
            raise ValueError(f"window_count must be an integer >= 1, got {self.window_count}")
        object.__setattr__(self, "entities", _freeze(self.entities))
        for spec, algorithm in (("quotas", self.algorithm), *self.algorithms.items()):
            if algorithm not in ALGORITHMS:
                raise ValueError(f"{getattr(spec, 'path', spec)}: algorithm must be one of {ALGORITHMS}, "
                                 f"got {algorithm!r}")
            if isinstance(spec, EntitySpec) and spec not in self.entities:
                raise ValueError(f"{spec.path}: an algorithm for an entity that sets no quota")
        object.__setattr__(self, "algorithms", MappingProxyType(dict(self.algorithms)))
        for spec, mode in (("quotas", self.mode), *self.modes.items(),
                           *((f"pool {p.name}", p.mode) for p in self.pools if p.mode is not None)):
            if mode not in MODES:
                raise ValueError(f"{getattr(spec, 'path', spec)}: mode must be one of {MODES}, got {mode!r}")
            if isinstance(spec, EntitySpec) and spec not in self.entities:
                raise ValueError(f"{spec.path}: a mode for an entity that sets no quota")
        object.__setattr__(self, "modes", MappingProxyType(dict(self.modes)))
        _check_pools(self.pools, self.shares)
        object.__setattr__(self, "pools", tuple(self.pools))
        object.__setattr__(self, "shares", MappingProxyType(dict(self.shares)))
        index: dict[str, dict[EntitySpec, float]] = {}
        grouped: dict[str | None, set[str]] = {}
        for spec, values in self.entities.items():
            for quota_type, value in values.items():
                index.setdefault(quota_type, {})[spec] = value
        # A pool member entry's prefix is a level too (pool membership resolves through it); quota
        # resolution passes over it, as over any level that sets no value of the type.
        for spec in (*self.entities, *self.shares):
            if spec.client_id_prefix is not None:
                grouped.setdefault(spec.user, set()).add(spec.client_id_prefix)
        object.__setattr__(self, "by_type", MappingProxyType(index))
        # Longest-prefix match probes one slice per distinct length rather than scanning prefixes.
        object.__setattr__(self, "prefixes", MappingProxyType({
            user: (tuple(sorted({len(p) for p in found}, reverse=True)), frozenset(found))
            for user, found in grouped.items()
        }))

    def algorithm_for(self, entity: EntitySpec) -> str:
        """How `entity`'s quotas measure use: its own `algorithm`, else the section's."""
        return self.algorithms.get(entity, self.algorithm)

    def observes(self, entity: EntitySpec) -> bool:
        """Whether `entity`'s quotas are observed: its own `mode`, else the section's."""
        return self.modes.get(entity, self.mode) == OBSERVE

    def observes_pool(self, pool: PoolSpec) -> bool:
        """Whether `pool`'s throttles are observed: its own `mode`, else the section's."""
        return (pool.mode or self.mode) == OBSERVE

    @property
    def enabled(self) -> bool:
        """True when any entity has any quota."""
        return bool(self.by_type)

    @property
    def quota_types(self) -> frozenset[str]:
        """The quota types some entity configures; all others are never enforced."""
        return frozenset(self.by_type)
