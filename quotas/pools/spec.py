"""Capacity pools as configured: frozen values that `QuotaSettings.pools` holds.

A pool is a budget of one or more quota types, shared by the principals its member selectors pick
(`user`, `client_id`, `client_id_prefix`; a principal matching any selector belongs) and, for a
topic pool, only for the bytes of the topics it names (`events`, or `logs-*`). Each selected
principal takes part as the entity it resolves to (pools/membership.py), with the `MemberShare`
(weight, min_share, max_share) of that entity's entry.

Two rules keep a request's charge unambiguous, both checked here exactly: a principal is in at most
one principal pool per quota type, and a topic's bytes in at most one topic pool per type and
principal (a principal pool and a topic pool may both apply); types that cannot be divided this way
are refused with the reason (`REFUSED`). A pool's `ServiceClass`es order its members, highest
first, with selectors that never overlap. This module imports nothing from the rest of kqp
(model.py imports it): quota types are compared as the strings they are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DEFAULT = "<default>"
# The rates a pool can divide: what a member offers per second, measurable per window.
POOL_TYPES = ("producer_byte_rate", "consumer_byte_rate", "request_rate", "producer_record_rate",
              "producer_batch_rate", "consumer_record_rate", "consumer_batch_rate")
# A topic pool divides the bytes of its topics: a request's other rates are not per topic.
TOPIC_POOL_TYPES = ("producer_byte_rate", "consumer_byte_rate")
REFUSED = {
    "request_percentage": "it is a share of one kqp event loop's time (KIP-124), kqp's own CPU and not a "
                          "capacity of the cluster behind it; use request_rate",
    "controller_mutation_rate": "KIP-599 admits or refuses each topic from a token bucket at once; mutations "
                                "come in rare bursts with no steady demand to divide",
}
TOPIC_NAME = re.compile(r"[A-Za-z0-9._*-]+")   # Kafka's legal topic characters, and * for patterns


@dataclass(frozen=True, slots=True)
class MemberShare:
    """How an entity takes part in the pools it is a member of: weight and bounds (fractions of B)."""

    weight: float = 1.0
    min_share: float = 0.0
    max_share: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"weight must be a finite number > 0, got {self.weight}")
        if not 0 <= self.min_share <= self.max_share <= 1:
            raise ValueError(f"need 0 <= min_share <= max_share <= 1, got {self.min_share} and {self.max_share}")


@dataclass(frozen=True, slots=True)
class MemberSelector:
    """Which principals a pool takes: every component given must match (None: any)."""

    user: str | None = None
    client_id: str | None = None
    client_id_prefix: str | None = None

    def __post_init__(self) -> None:
        given = (self.user, self.client_id, self.client_id_prefix)
        if all(part is None for part in given):
            raise ValueError("a member selector needs a user, a client_id or a client_id_prefix")
        if self.client_id is not None and self.client_id_prefix is not None:
            raise ValueError("a member selector has a client_id or a client_id_prefix, not both")
        if any(part in ("", DEFAULT) for part in given):
            raise ValueError("a member selector names principals: no empty names and no <default> (omit the key "
                             "to select any)")

    def matches(self, user: str, client_id: str) -> bool:
        return ((self.user is None or user == self.user)
                and (self.client_id is None or client_id == self.client_id)
                and (self.client_id_prefix is None or client_id.startswith(self.client_id_prefix)))

    def overlaps(self, other: MemberSelector) -> bool:
        """Whether some principal matches both."""
        if self.user is not None and other.user is not None and self.user != other.user:
            return False
        mine, theirs = (self.client_id, self.client_id_prefix), (other.client_id, other.client_id_prefix)
        if mine == (None, None) or theirs == (None, None):
            return True
        if self.client_id is not None and other.client_id is not None:
            return self.client_id == other.client_id
        if self.client_id is not None:
            return self.client_id.startswith(other.client_id_prefix or "")
        if other.client_id is not None:
            return other.client_id.startswith(self.client_id_prefix or "")
        a, b = self.client_id_prefix or "", other.client_id_prefix or ""
        return a.startswith(b) or b.startswith(a)

    def contains(self, user: str | None, client_id: str | None, prefix: str | None) -> bool:
        """Whether every principal of a pattern matches: None is any name, `DEFAULT` one name per
        member (so never split by this selector), `prefix` every client id starting with it."""
        if self.user is not None and user not in (self.user, DEFAULT):
            return False
        if self.client_id is not None:
            return client_id in (self.client_id, DEFAULT)
        if self.client_id_prefix is not None:
            if client_id is not None:
                return client_id == DEFAULT or client_id.startswith(self.client_id_prefix)
            return prefix is not None and prefix.startswith(self.client_id_prefix)
        return True

    @property
    def shown(self) -> str:
        parts = [f"{k}={v}" for k, v in (("user", self.user), ("client_id", self.client_id),
                                          ("client_id_prefix", self.client_id_prefix)) if v is not None]
        return "{" + ", ".join(parts) + "}"


def pattern_overlaps(selector: MemberSelector, user: str | None, client_id: str | None, prefix: str | None) -> bool:
    """Whether some principal of the pattern (as in `MemberSelector.contains`) matches `selector`."""
    if selector.user is not None and user not in (None, DEFAULT, selector.user):
        return False
    if client_id is None or client_id == DEFAULT:
        mine: tuple[str | None, str | None] = (None, prefix)
    else:
        mine = (client_id, None)
    if mine == (None, None) or (selector.client_id, selector.client_id_prefix) == (None, None):
        return True
    if selector.client_id is not None:
        return selector.client_id == mine[0] if mine[0] is not None else selector.client_id.startswith(mine[1] or "")
    wanted = selector.client_id_prefix or ""
    if mine[0] is not None:
        return mine[0].startswith(wanted)
    other = mine[1] or ""
    return other.startswith(wanted) or wanted.startswith(other)


def topic_pattern_error(pattern: str) -> str | None:
    """Why `pattern` is no topic name or pattern, or None."""
    if not pattern or not TOPIC_NAME.fullmatch(pattern) or len(pattern) > 249:
        return "must be a topic name or a pattern with * (letters, digits, . _ - and *; at most 249 characters)"
    return None


def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(map(re.escape, pattern.split("*"))))


def topic_matches(pattern: str, topic: str) -> bool:
    if "*" not in pattern:
        return pattern == topic
    return _regex(pattern).fullmatch(topic) is not None


def patterns_overlap(a: str, b: str) -> bool:
    """Whether some topic matches both. With `*` the only wildcard this is exact: two patterns that
    both have a `*` overlap iff their fixed starts agree (one starts the other) and so do their fixed
    ends, since each one's stars can swallow what the other pattern puts in the middle."""
    if "*" not in a or "*" not in b:
        literal, other = (a, b) if "*" not in a else (b, a)
        return topic_matches(other, literal)
    head_a, head_b = a.split("*", 1)[0], b.split("*", 1)[0]
    tail_a, tail_b = a.rsplit("*", 1)[1], b.rsplit("*", 1)[1]
    return ((head_a.startswith(head_b) or head_b.startswith(head_a))
            and (tail_a.endswith(tail_b) or tail_b.endswith(tail_a)))


@dataclass(frozen=True, slots=True)
class AdaptiveSpec:
    """`adaptive:` on a pool: the budget becomes a ceiling that a control loop lowers while
    the upstream's latency for the pool's requests is above `target_latency_ms`. Carried as
    configured; the control law lives in its own module."""

    target_latency_ms: float
    min_budget: Mapping[str, float] = field(default_factory=dict)   # quota type -> floor; absent: the law's

    def __post_init__(self) -> None:
        if not (math.isfinite(self.target_latency_ms) and self.target_latency_ms > 0):
            raise ValueError(f"target_latency_ms must be > 0, got {self.target_latency_ms}")
        object.__setattr__(self, "min_budget", MappingProxyType(dict(self.min_budget)))


@dataclass(frozen=True, slots=True)
class ServiceClass:
    """One class of a pool's members: who is in it (empty: the last class only, everyone the others
    leave), the most the class takes of the budget, and how many seconds of their allocation its
    members may save while quiet and spend at once."""

    name: str
    members: tuple[MemberSelector, ...] = ()
    max_share: float = 1.0
    burst_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a class needs a name")
        if not (math.isfinite(self.max_share) and 0 < self.max_share <= 1):
            raise ValueError(f"class {self.name}: max_share must be a fraction of the budget, 0 < max_share <= 1, "
                             f"got {self.max_share}")
        if not (math.isfinite(self.burst_seconds) and self.burst_seconds >= 0):
            raise ValueError(f"class {self.name}: burst_seconds must be a finite number >= 0, got {self.burst_seconds}")


@dataclass(frozen=True)
class PoolSpec:
    """One configured pool: its budget per quota type, who is in it, and which topics it covers."""

    name: str
    budgets: Mapping[str, float]
    members: tuple[MemberSelector, ...] = ()    # empty: every principal (topic pools only)
    topics: tuple[str, ...] = ()                # empty: all of a member's traffic (a principal pool)
    adaptive: AdaptiveSpec | None = None
    mode: str | None = None                     # "observe" or "enforce"; None: quotas.mode
    classes: tuple[ServiceClass, ...] = ()      # highest first; none: one class of everyone

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a pool needs a name")
        if not self.budgets:
            raise ValueError(f"pool {self.name}: no budget; give one of {', '.join(POOL_TYPES)}")
        allowed = TOPIC_POOL_TYPES if self.topics else POOL_TYPES
        for quota_type, value in self.budgets.items():
            if quota_type not in allowed:
                why = REFUSED.get(quota_type, "a topic pool divides bytes only" if self.topics else "unknown")
                raise ValueError(f"pool {self.name}: {quota_type} cannot be pooled: {why}")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"pool {self.name}: {quota_type} must be a finite number > 0, got {value}")
        if not self.members and not self.topics:
            raise ValueError(f"pool {self.name}: needs members (a pool of everyone is a topic pool's)")
        for pattern in self.topics:
            error = topic_pattern_error(pattern)
            if error:
                raise ValueError(f"pool {self.name}: topic {pattern!r} {error}")
        if self.adaptive is not None:
            for quota_type, floor in self.adaptive.min_budget.items():
                if quota_type not in self.budgets or not 0 <= floor <= self.budgets[quota_type]:
                    raise ValueError(f"pool {self.name}: adaptive min_budget for {quota_type} must be between 0 "
                                     "and the pool's budget of that type")
        error = self._classes_error()
        if error:
            raise ValueError(f"pool {self.name}: {error}")
        object.__setattr__(self, "budgets", MappingProxyType(dict(self.budgets)))

    def _classes_error(self) -> str | None:
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            return f"class names must be unique, got {names}"
        for i, c in enumerate(self.classes):
            if not c.members and i != len(self.classes) - 1:
                return f"class {c.name} has no members: only the last class may leave them out (it takes the rest)"
            if c.burst_seconds and i == len(self.classes) - 1:
                return f"class {c.name} is the lowest: no class below it repays a burst (burst_seconds)"
            for s in c.members:
                if self.members and not any(s.overlaps(m) for m in self.members):
                    return f"class {c.name} selects {s.shown}, which is no member of the pool"
                for earlier in self.classes[:i]:
                    if any(s.overlaps(e) for e in earlier.members):
                        return (f"classes {earlier.name} and {c.name} could both take a principal "
                                f"({c.name}'s {s.shown}): a member is in one class")
        return None

    def rank(self, user: str | None, client_id: str | None, prefix: str | None) -> int:
        """The class (index, 0 the highest) of a member whose principals form the pattern (as in
        `MemberSelector.contains`): the first class containing it, else the lowest."""
        for i, c in enumerate(self.classes):
            if any(s.contains(user, client_id, prefix) for s in c.members):
                return i
        return max(0, len(self.classes) - 1)

    def class_split(self, user: str | None, client_id: str | None, prefix: str | None
                    ) -> tuple[ServiceClass, MemberSelector] | None:
        """A class, and its selector, that would take some but maybe not all principals of one member
        of this pattern (an entity: None any name, `DEFAULT` one member per name), or None if the
        classes keep each of its members whole."""
        for c in self.classes:
            for s in c.members:
                if pattern_overlaps(s, user, client_id, prefix) and not s.contains(user, client_id, prefix):
                    return c, s
        return None

    def selects(self, user: str, client_id: str) -> bool:
        """Whether the principal is a member (any selector; no selectors: everyone)."""
        return not self.members or any(s.matches(user, client_id) for s in self.members)

    def covers(self, topic: str) -> bool:
        return any(topic_matches(pattern, topic) for pattern in self.topics)

    def overlaps(self, other: PoolSpec) -> bool:
        """Whether one request's charge of some type could fall in both (the types aside)."""
        if bool(self.topics) != bool(other.topics):
            return False
        if self.topics and not any(patterns_overlap(a, b) for a in self.topics for b in other.topics):
            return False
        if not self.members or not other.members:
            return True
        return any(a.overlaps(b) for a in self.members for b in other.members)


def pool_conflict(pools: tuple[PoolSpec, ...]) -> tuple[int, int, str] | None:
    """The first two pools (indices) that could both charge one request for a type (named), or None."""
    for j, later in enumerate(pools):
        for i, earlier in enumerate(pools[:j]):
            shared = [t for t in earlier.budgets if t in later.budgets]
            if shared and earlier.overlaps(later):
                return i, j, shared[0]
    return None
