"""Immutable quota settings and the names the quota layer shares with the rest of kqp.

`kqp.config` builds a :class:`QuotaSettings` from YAML; `kqp.proxy` names who sent a request
with a :class:`Principal`; the quota manager charges each request to a :class:`QuotaKey`. These
are plain frozen values so a reload can build new settings off to the side and swap them in whole,
and so the module stays import-light (config imports it without pulling in any quota machinery).

The vocabulary is Kafka's: an entity is a `<user, client-id>` pair where either component may be
omitted (``None``) or be the ``<default>`` placeholder, exactly the config nodes
``/users/<user>/clients/<client-id>`` that `kafka-configs.sh` writes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

ANONYMOUS = "ANONYMOUS"  # Kafka's principal name for an unauthenticated connection
DEFAULT = "<default>"  # Kafka's placeholder entity name (ZooKeeperInternals.DEFAULT_STRING)

QUOTA_TYPES: tuple[str, ...] = (
    "producer_byte_rate",  # KIP-13
    "consumer_byte_rate",  # KIP-13
    "request_percentage",  # KIP-124 (accepted): percent of one thread
    "request_rate",  # KIP-124 (draft): requests per second
    "controller_mutation_rate",  # KIP-599: partition mutations per second, token bucket
    "producer_record_rate",  # KIP-731 vocabulary, enforced at the proxy
    "producer_batch_rate",
    "consumer_record_rate",
    "consumer_batch_rate",
)


@dataclass(frozen=True, slots=True)
class EntitySpec:
    """One configured quota entity; ``None`` omits a component, ``"<default>"`` is the default."""

    user: str | None
    client_id: str | None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity needs a user, a client id or both")
        # An empty name would collide with the "" that QuotaKey uses for "shared by all clients".
        if self.user == "" or self.client_id == "":
            raise ValueError("entity names must not be empty; use None to omit a component")

    @property
    def path(self) -> str:
        """Kafka's config node name, e.g. ``/users/alice/clients/<default>``."""
        user = "" if self.user is None else f"/users/{self.user}"
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
    """

    user: str
    client_id: str


def _freeze(entities: Mapping[EntitySpec, Mapping[str, float]]) -> Mapping[EntitySpec, Mapping[str, float]]:
    frozen: dict[EntitySpec, Mapping[str, float]] = {}
    for spec, values in entities.items():
        if not isinstance(spec, EntitySpec):
            raise TypeError(f"entity keys must be EntitySpec, got {spec!r}")
        checked: dict[str, float] = {}
        for quota_type, value in values.items():
            if quota_type not in QUOTA_TYPES:
                raise ValueError(f"{spec.path}: unknown quota type {quota_type!r}")
            value = float(value)
            # Kafka refuses negative or non-finite quotas; 0 is accepted here and means "block"
            # (see sensor.py for what a zero quota does).
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{spec.path}: {quota_type} must be a finite number >= 0, got {value}")
            checked[quota_type] = value
        frozen[spec] = MappingProxyType(checked)
    return MappingProxyType(frozen)


@dataclass(frozen=True)
class QuotaSettings:
    """Everything the quota layer needs from the config file, frozen.

    ``window_size_seconds`` and ``window_count`` are Kafka's ``quota.window.size.seconds`` and
    ``quota.window.num``. A reload builds a new instance; the per-type index and the resolution
    cache live on the instance, so replacing the settings is what invalidates the cache.
    """

    window_size_seconds: float = 1.0
    window_count: int = 11
    entities: Mapping[EntitySpec, Mapping[str, float]] = field(default_factory=dict)
    # quota type -> {entity: limit}; derived once so resolution does a handful of dict lookups.
    by_type: Mapping[str, Mapping[EntitySpec, float]] = field(init=False, repr=False, compare=False)
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
        index: dict[str, dict[EntitySpec, float]] = {}
        for spec, values in self.entities.items():
            for quota_type, value in values.items():
                index.setdefault(quota_type, {})[spec] = value
        object.__setattr__(self, "by_type", MappingProxyType(index))

    @property
    def enabled(self) -> bool:
        """True when any entity has any quota."""
        return bool(self.by_type)

    @property
    def quota_types(self) -> frozenset[str]:
        """The quota types some entity configures; all others are never enforced."""
        return frozenset(self.by_type)
