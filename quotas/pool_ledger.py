"""One pool's budget of one quota type at run time: its members' sensors, demand and allocations.

Each member (pool_membership.py) has a `QuotaSensor` of its own whose limit is its quota in the
pool; its throttles are Kafka's, and the manager returns them with the entity quotas' from the same
`record_*` call, so the smaller limit wins. The division is per window, never per request: a charge
costs a window index, an addition and the sensor's own charge; the first charge of a new window
reallocates: each member's demand (unbounded while a pool throttle held it back in the last two
windows, else its recent use), weighted max-min over the demands (allocation.py), and each member's
quota ``max(allocation, fair share)``, so only unused share is lent. A lender that comes back is
taken to want its whole share and the pool divides again before its charge is checked. When a
member's quota moves, its samples follow (`QuotaSensor.follow_limit`). In a fleet, usage, held
marks and weights are shared through the fleet ledger, so every process divides alike; the bound
on overshoot during a reclaim and the reasons are in quotas/README.md ("Capacity pools").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from urllib.parse import quote

from kqp.quotas.allocation import INFINITE, Claim, allocate, fair_shares
from kqp.quotas.fleet import FleetLedger, SharedUsage, sensor_name
from kqp.quotas.model import TOKEN_BUCKET, QuotaKey, QuotaSettings, QuotaType
from kqp.quotas.pool_membership import Membership
from kqp.quotas.pool_spec import PoolSpec
from kqp.quotas.sensor import QuotaSensor
from kqp.quotas.throttle import CAPPED_TYPES

# Unseen members (fleet) below this fraction of the budget are noise of the exchange, not a claim.
_UNSEEN_FLOOR = 0.005


def _add(into: dict[int, float], per_window: dict[int, float]) -> None:
    for window, value in per_window.items():
        into[window] = into.get(window, 0.0) + value


def pool_sensor_name(pool: str, quota_type: str, key: QuotaKey | None) -> str:
    """A member's name in the fleet store (None: the pool's total); never an entity sensor's."""
    head = f"pool={quote(pool, safe='')}:"
    return head + (f"{quota_type}:*" if key is None else sensor_name(QuotaType(quota_type), key))


class Member:
    """One member's sensor, its usage per window over the last span, and its division."""

    __slots__ = ("allocation", "at", "demand", "fair", "held", "held_until", "last_use", "membership",
                 "quota", "rate", "sensor", "slot", "static", "trigger", "used", "wants_from")

    def __init__(self, membership: Membership, sensor: QuotaSensor, now: float, windows: int,
                 static: bool = False) -> None:
        self.membership = membership
        self.sensor = sensor
        self.static = static                 # named by the config: kept, and read from the fleet, while unused
        self.held: SharedUsage | None = None  # fleet: windows in which a pool throttle held this member back
        self.used = [0.0] * (windows + 1)    # usage per window, by window index modulo the ring's size
        self.at = -1                         # the window `used[slot]` counts
        self.slot = 0
        self.held_until = -math.inf
        self.last_use = -math.inf if static else now
        self.demand = self.allocation = self.fair = self.rate = 0.0
        self.quota = sensor.limit
        self.trigger = INFINITE               # usage in a window past which a lender wants its share back
        self.wants_from = -1                  # window since which it wants its share (until one is measured)

    def shift(self, window: int) -> None:
        """Move to `window`: the windows skipped since (none charged) count 0."""
        gap = window - self.at
        if gap <= 0:
            return
        size = len(self.used)
        for back in range(min(gap, size)):
            self.used[(window - back) % size] = 0.0
        self.at = window
        self.slot = window % size

    def usage(self, window: int) -> float:
        """What it used in `window`, one of the ring's (shifted to the current window first)."""
        return self.used[window % len(self.used)] if self.at - len(self.used) < window <= self.at else 0.0

    @property
    def borrowed(self) -> float:
        """What the member may use above its guaranteed share: others' unused shares."""
        return max(0.0, self.quota - self.fair)


class PoolLedger:
    """The members of one pool for one quota type, and the division of its budget among them."""

    def __init__(self, pool: PoolSpec, quota_type: QuotaType, settings: QuotaSettings, now: float,
                 fleet: FleetLedger | None = None) -> None:
        self.pool = pool
        self.quota_type = quota_type
        self.ceiling = pool.budgets[quota_type]     # the configured budget
        self.budget = self.ceiling                  # the budget divided: below the ceiling while adaptive lowers it
        self.settings = settings
        self.fleet = fleet
        self.members: dict[QuotaKey, Member] = {}
        self.unseen = 0.0                           # fleet: demand of members only other processes know
        self.window = -1                            # the window of the last reallocation
        self.span = settings.window_size_seconds * settings.window_count
        self._per_second = 1.0 / settings.window_size_seconds if fleet is None else fleet.windows_per_second
        # Fleet: the pool's usage and held marks, all members together, for the members not known here.
        self.total: SharedUsage | None = None
        self.total_held: SharedUsage | None = None
        self.total_weight: SharedUsage | None = None   # per window: the weights of the members charged in it
        self.unseen_weight = 1.0
        # An adaptive pool's window step (adaptive_pools.py): (now, window, demand) -> the budget to divide.
        self.on_window: Callable[[float, int, float], float] | None = None
        self.observed = settings.observes_pool(pool)   # its throttles counted, never acted on
        if fleet is not None:
            name = pool_sensor_name(pool.name, quota_type, None)
            self.total, self.total_held, self.total_weight = (fleet.usage_for(name + suffix, now)
                                                              for suffix in ("", ":held", ":weight"))
            self.total.watched = self.total_held.watched = self.total_weight.watched = True

    # -- time ------------------------------------------------------------------------------------
    def _offset(self) -> float:
        return 0.0 if self.fleet is None else self.fleet.offset

    def index(self, now: float) -> int:
        """The window `now` falls in: fleet time's windows in cluster scope, so that every process
        reallocates on the same windows and reads the store's per-window totals for them."""
        return int((now + self._offset()) * self._per_second)

    # -- members ---------------------------------------------------------------------------------
    def _algorithm(self, membership: Membership) -> str:
        """How the member's pool quota measures use: its entity's algorithm (or the section's), but a
        token bucket in an adaptive pool, whose budget sits near the upstream's capacity: the sampled
        rate's echo bursts would overrun it (quotas/README.md: 0.27 C for the jobs against 0.98 C)."""
        if self.pool.adaptive is not None:
            return TOKEN_BUCKET
        s = self.settings
        return s.algorithm if membership.entity is None else s.algorithm_for(membership.entity)

    def _sensor(self, membership: Membership, limit: float, now: float) -> QuotaSensor:
        s = self.settings
        algorithm = self._algorithm(membership)
        shared = None if self.fleet is None else self.fleet.usage_for(
            pool_sensor_name(self.pool.name, self.quota_type, membership.key), now)
        return QuotaSensor(limit, s.window_size_seconds, s.window_count, now,
                           cap=s.window_size_seconds if self.quota_type in CAPPED_TYPES else None,
                           token_bucket=algorithm == TOKEN_BUCKET, entity=membership.entity, shared=shared)

    def add(self, membership: Membership, now: float, static: bool = False) -> Member:
        """A member, new here: its quota is its share of the budget before its first charge."""
        member = self.members[membership.key] = Member(membership, self._sensor(membership, self.budget, now),
                                                       now, self.settings.window_count, static)
        if self.fleet is not None:
            member.held = self.fleet.usage_for(pool_sensor_name(self.pool.name, self.quota_type,
                                                                membership.key) + ":held", now)
            if static:
                member.held.watched = member.sensor.shared.watched = True   # type: ignore[union-attr]
        if not static:
            self._wants_share(member, now)
        return member

    def _wants_share(self, member: Member, now: float) -> None:
        """`member` wants its whole share from now until a full window has measured it: divide now."""
        member.demand = INFINITE
        member.wants_from = self.index(now)
        member.last_use = now
        self.divide(now)

    def restart(self, member: Member, membership: Membership, now: float) -> None:
        """A new share or entity for a member (a reload); a new sensor if its algorithm changed."""
        member.membership = membership
        if (member.sensor.bucket is not None) != (self._algorithm(membership) == TOKEN_BUCKET):
            member.sensor = self._sensor(membership, member.quota, now)   # samples say nothing about tokens
        member.sensor.entity = membership.entity

    def forget(self, key: QuotaKey) -> None:
        member = self.members.pop(key, None)
        if member is not None and self.fleet is not None:
            name = pool_sensor_name(self.pool.name, self.quota_type, key)
            self.fleet.forget(name)
            self.fleet.forget(name + ":held")

    # -- charging --------------------------------------------------------------------------------
    def charge(self, member: Member, value: float, now: float) -> float:
        """Record `value` for `member` and return the pool's throttle for it (0 within its quota)."""
        fleet = self.fleet
        window = int((now if fleet is None else now + fleet.offset) * self._per_second)
        if window > self.window:
            self.reallocate(now, window)
        if member.at != window:
            member.shift(window)
        used = member.used
        slot = member.slot
        if used[slot] + value > member.trigger or (now - member.last_use >= self.span
                                                   and member.held_until < now - self.span):
            # Back after a span of silence, or a lender using twice what it was measured at within one
            # window: it wants its share back, now, before this charge is checked (the borrowers'
            # quotas shrink at once: "reallocation within a window reclaims it").
            self._wants_share(member, now)
        if not used[slot] and self.total_weight is not None:   # its first charge in this window
            self.total_weight.record(member.membership.share.weight, now)
        used[slot] += value
        member.last_use = now
        if self.total is not None:
            self.total.record(value, now)
        t = member.sensor.charge(value, now)
        if t > 0:
            self._held(member, now, t, window)
        return t

    def refund(self, member: Member, value: float, now: float) -> None:
        """Take back a charge (a Fetch answered empty): the member did not get those units."""
        member.shift(self.index(now))
        member.used[member.slot] -= value
        member.sensor.refund(value, now)
        if self.total is not None:
            self.total.record(-value, now)

    def _held(self, member: Member, now: float, throttle: float, window: int) -> None:
        until = now + throttle
        if until > member.held_until:
            member.held_until = until
        if member.held is not None and self.total_held is not None:
            # One mark per window the mute reaches into, so that the others see it held throughout.
            last = min(self.index(until), window + self.settings.window_count + 1)
            step = 1.0 / self._per_second
            for n in range(last - window + 1):
                member.held.record(1.0, now + n * step)
                self.total_held.record(1.0, now + n * step)

    # -- division --------------------------------------------------------------------------------
    def _shared(self) -> bool:
        return self.fleet is not None and self.fleet.shared

    def reallocate(self, now: float, window: int | None = None) -> None:
        """Measure every member's demand over the last two windows, then divide the budget anew."""
        window = self.index(now) if window is None else window
        if window <= self.window:
            return
        self.window = window
        last, before = window - 1, window - 2
        held_from = before / self._per_second - self._offset()   # when window `before` began, here
        shared = self._shared()
        known: dict[int, float] = {}         # fleet: the others' usage of the members known here, per window
        known_held: dict[int, float] = {}
        known_weight = 0.0                   # the weights of known members the others charged last window
        first = window - self.settings.window_count   # the span: the complete windows first .. last
        for member in self.members.values():
            if (now - member.last_use >= self.span and member.held_until <= held_from
                    and not (shared and member.sensor.shared.others_active)):   # type: ignore[union-attr]
                member.demand = member.rate = 0.0   # silent for a span here and elsewhere: nothing to measure
                continue
            member.shift(window)
            used1, used2 = member.usage(last), member.usage(before)
            total = sum(member.used) - member.used[member.slot]
            held = member.held_until > held_from
            if shared:
                others = member.sensor.shared.others   # type: ignore[union-attr]
                used1, used2 = used1 + others.get(last, 0.0), used2 + others.get(before, 0.0)
                total += sum(used for w, used in others.items() if first <= w <= last)
                _add(known, others)
                if others.get(last, 0.0) > 0:
                    known_weight += member.membership.share.weight
                marks = member.held.others             # type: ignore[union-attr]
                _add(known_held, marks)
                held = held or any(marks.get(w, 0.0) > 0 for w in (before, last, window))
            member.rate = total / self.span
            if member.wants_from >= last:
                continue   # joined or came back in the last window: not measured whole yet, still wanting
            # Requests are lumpy: one request in two windows reads as twice the rate in one of them.
            # The rate over the span is smooth but slow to see a member go quiet: take the smaller.
            member.demand = INFINITE if held else min(max(used1, used2) * self._per_second, member.rate)
        self.unseen = self._unseen(window, known, known_held) if shared else 0.0
        if self.unseen:
            # As many as the weights the others charged beyond the known members (at least one).
            weights = self.total_weight.others   # type: ignore[union-attr]
            self.unseen_weight = max(1.0, max(weights.get(last, 0.0), weights.get(before, 0.0)) - known_weight)
        if self.on_window is not None:   # adaptive: the law closes the window and says what to divide
            demand = sum(m.demand for m in self.members.values()) + self.unseen
            self.budget = min(self.ceiling, self.on_window(now, window, demand))
        self.divide(now)

    def _unseen(self, window: int, known: dict[int, float], known_held: dict[int, float]) -> float:
        """Fleet: the demand of members that only other processes know, from the pool's totals less
        the known members', measured as a member's is (held, else the smaller of recent and span)."""
        totals, marks = self.total.others, self.total_held.others   # type: ignore[union-attr]
        if any(marks.get(w, 0.0) > known_held.get(w, 0.0) + 0.5 for w in (window - 2, window - 1, window)):
            return INFINITE
        first = window - self.settings.window_count
        used = {w: u - known.get(w, 0.0) for w, u in totals.items() if first <= w < window}
        recent = max(used.get(window - 1, 0.0), used.get(window - 2, 0.0)) * self._per_second
        demand = min(recent, sum(used.values()) / self.span)
        return demand if demand > _UNSEEN_FLOOR * self.budget else 0.0

    def _active(self, member: Member, now: float) -> bool:
        if member.demand > 0 or now - member.last_use < self.span:
            return True
        shared = member.sensor.shared
        return shared is not None and self._shared() and shared.others_active > 0

    def divide(self, now: float) -> None:
        """Divide the budget over the demands last measured: q = max(allocation, fair share).

        Members silent for a span, here and in the fleet, are left out (no share is kept for them);
        they take part again from their next charge, which divides at once."""
        active = [m for m in self.members.values() if self._active(m, now)]
        claims = [Claim(m.membership.share.weight, m.demand, m.membership.share.min_share,
                        m.membership.share.max_share) for m in active]
        if self.unseen:
            claims.append(Claim(self.unseen_weight, self.unseen))
        allocations = allocate(self.budget, claims)
        shares = fair_shares(self.budget, claims)
        twice = 2.0 / self._per_second
        for member in self.members.values():
            member.allocation = member.fair = 0.0   # the inactive keep their quota, and no share
        for member, a, g in zip(active, allocations, shares, strict=False):   # the unseen claim is last
            member.allocation, member.fair = a, g
            member.trigger = member.demand * twice if a < g else INFINITE
            quota = max(a, g)
            if quota != member.quota:
                member.quota = quota
                member.sensor.follow_limit(quota)

    @property
    def lent(self) -> float:
        """What members using less than their fair share lend: sum of (g - a) over them. The members'
        quotas sum to at most budget + lent (the module docstring's bound)."""
        return sum(m.fair - m.allocation for m in self.members.values() if m.allocation < m.fair)

    def set_budget(self, budget: float, now: float) -> None:
        """The budget to divide from now on, at most the configured ceiling (the adaptive control law
        lowers it while the upstream is slow and raises it back); divided at once."""
        if not (math.isfinite(budget) and budget >= 0):
            raise ValueError(f"a pool budget must be a finite number >= 0, got {budget}")
        budget = min(budget, self.ceiling)
        if budget != self.budget:
            self.budget = budget
            self.divide(now)

    def expire(self, now: float, idle_seconds: float) -> int:
        """Drop members unused for `idle_seconds` (never those the config names in cluster scope)."""
        stale = [key for key, m in self.members.items()
                 if not m.static and now - m.last_use >= idle_seconds and m.held_until < now]
        for key in stale:
            self.forget(key)
        return len(stale)
