"""One pool's budget of one quota type at run time: its members' sensors, demand and allocations.

Each member (pools/membership.py) has a `QuotaSensor` of its own whose limit is its quota in the
pool; the manager returns its throttles with the entity quotas', so the smaller limit wins. The
division is per window, never per request: the first charge of a new window reallocates: each
member's demand (unbounded while a pool throttle held it back in the last two windows, else its
recent use), the classes in order with weighted max-min within one (pools/allocation.py), and each
member's quota ``max(allocation, fair share)``, so only unused share is lent. A lender that comes
back is taken to want its whole share and the pool divides again before its charge is checked: the
classes below fall at once (a pre-emption). A member of a class with `burst_seconds` saves unused
quota as credit, which pays for charges its quota would throttle; the pool divides that much less
in the next windows. A member's samples follow its quota (`QuotaSensor.follow_limit`). In a fleet,
usage, held marks and weights are shared per class, so every process divides alike (quotas/README.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from urllib.parse import quote

from kqp.quotas.fleet.ledger import FleetLedger, SharedUsage, sensor_name
from kqp.quotas.model import TOKEN_BUCKET, QuotaKey, QuotaSettings, QuotaType
from kqp.quotas.pools.allocation import INFINITE, Claim, allocate, cut_from_bottom, fair_shares
from kqp.quotas.pools.membership import Membership
from kqp.quotas.pools.spec import PoolSpec, ServiceClass
from kqp.quotas.rates.sensor import QuotaSensor
from kqp.quotas.rates.throttle import CAPPED_TYPES

# Unseen members (fleet) below this fraction of the budget are noise of the exchange, not a claim.
_UNSEEN_FLOOR = 0.005
# A member of a class with classes below it wants its whole share back (pre-empting them) only once it
# uses this fraction of that share within a window: one small message is not a class starting to offer.
_RECLAIM_FLOOR = 0.05


def _add(into: dict[int, float], per_window: dict[int, float]) -> None:
    for window, value in per_window.items():
        into[window] = into.get(window, 0.0) + value


def pool_sensor_name(pool: str, quota_type: str, key: QuotaKey | None, service_class: str | None = None) -> str:
    """A member's name in the fleet store (None: the pool's total, or one class's); never an entity sensor's."""
    head = f"pool={quote(pool, safe='')}:"
    if key is not None:
        return head + sensor_name(QuotaType(quota_type), key)
    return head + f"{quota_type}:*" + ("" if service_class is None else f":class={quote(service_class, safe='')}")


def key_pattern(key: QuotaKey) -> tuple[str | None, str | None, str | None]:
    """The principals a member key stands for, as `PoolSpec.rank` reads them: "" is any name."""
    if key.client_id_prefix is not None:
        return key.user or None, None, key.client_id_prefix
    return key.user or None, key.client_id or None, None


class ClassTotals:
    """Fleet: one class's usage, held marks and weights, all its members together (for those not known
    here), and the demand and weight of the members only other processes serve."""

    __slots__ = ("held", "total", "unseen", "unseen_weight", "weight")

    def __init__(self, fleet: FleetLedger, name: str, now: float) -> None:
        self.total, self.held, self.weight = (fleet.usage_for(name + suffix, now)
                                              for suffix in ("", ":held", ":weight"))
        self.total.watched = self.held.watched = self.weight.watched = True
        self.unseen = 0.0
        self.unseen_weight = 1.0


class Member:
    """One member's sensor, its usage per window over the last span, and its division."""

    __slots__ = ("allocation", "at", "credit", "demand", "fair", "held", "held_until", "last_use", "membership",
                 "quota", "rank", "rate", "sensor", "since", "slot", "spent", "static", "trigger", "used",
                 "wants_from")

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
        self.since = -1                       # the window it joined or came back in: its rate is over no more
        self.rank = 0                         # its class, 0 the highest (PoolSpec.rank)
        self.credit = 0.0                     # a burst class's saved quota, units (ledger's `_accrue`)
        self.spent = 0.0                      # credit spent in the current window

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
        # With a burst class: what the pool used over the span beyond its budget, per second of the
        # coming window, is divided less (`_excess`), so that no span holds more than the budget's worth.
        self.excess = 0.0
        self.used = [0.0] * (settings.window_count + 1)     # the pool's usage per window (a ring, as a member's)
        self.burst = [0.0] * (settings.window_count + 1)    # ... what burst classes used in it above their quotas
        self.budgets = [self.budget] * (settings.window_count + 1)   # ... and the budget in force
        self.used_at = -1
        self.settings = settings
        self.fleet = fleet
        self.members: dict[QuotaKey, Member] = {}
        self.window = -1                            # the window of the last reallocation
        self.span = settings.window_size_seconds * settings.window_count
        self._per_second = 1.0 / settings.window_size_seconds if fleet is None else fleet.windows_per_second
        self.classes: tuple[ServiceClass, ...] = ()
        self.shares: tuple[float, ...] = ()          # each class's max_share, by rank
        self.bursts: tuple[float, ...] = (0.0,)      # each class's burst_seconds, by rank
        # Fleet: per class (one for a pool without classes), its members' usage, held marks and weights.
        self.totals: list[ClassTotals] = []
        self.preemptions: dict[str, int] = {}        # class -> divisions that cut it for a higher class
        self.wanting_until = -math.inf               # when the last member to want its whole share is measured
        # An adaptive pool's window step (pools/adaptive.py): (now, window, demand) -> the budget to divide.
        self.on_window: Callable[[float, int, float], float] | None = None
        self.observed = settings.observes_pool(pool)   # its throttles counted, never acted on
        self.set_classes(pool, now)

    def set_classes(self, pool: PoolSpec, now: float) -> None:
        """The pool's classes (again, on a reload): each member's rank; in a fleet, each class's totals."""
        renamed = [c.name for c in pool.classes] != [c.name for c in self.classes]
        self.classes = pool.classes
        self.shares = tuple(c.max_share for c in pool.classes)
        self.bursts = tuple(c.burst_seconds for c in pool.classes) or (0.0,)
        # the highest class that may burst: what it spends is taken back from the classes below it
        self.burst_rank = next((rank for rank, b in enumerate(self.bursts) if b > 0), -1)
        self.preemptions = {c.name: self.preemptions.get(c.name, 0) for c in pool.classes}
        for member in self.members.values():
            member.rank = pool.rank(*key_pattern(member.membership.key))
        if self.fleet is not None and (renamed or not self.totals):
            for totals in self.totals:
                for usage in (totals.total, totals.held, totals.weight):
                    self.fleet.forget(usage.name)
            names = [c.name for c in pool.classes] or [None]
            self.totals = [ClassTotals(self.fleet, pool_sensor_name(pool.name, self.quota_type, None, name), now)
                           for name in names]

    @property
    def unseen(self) -> float:
        """Fleet: the demand of members only other processes know, all classes together."""
        return sum(t.unseen for t in self.totals)

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
                           algorithm=algorithm, entity=membership.entity, shared=shared)

    def add(self, membership: Membership, now: float, static: bool = False) -> Member:
        """A member, new here: its quota is its share of the budget before its first charge."""
        member = self.members[membership.key] = Member(membership, self._sensor(membership, self.budget, now),
                                                       now, self.settings.window_count, static)
        member.rank = self.pool.rank(*key_pattern(membership.key))
        member.since = self.index(now)
        if self.fleet is not None:
            member.held = self.fleet.usage_for(pool_sensor_name(self.pool.name, self.quota_type,
                                                                membership.key) + ":held", now)
            if static:
                member.held.watched = member.sensor.shared.watched = True   # type: ignore[union-attr]
        if not static:
            if self._reclaims(member, 0.0, self.index(now), now):
                self._wants_share(member, now)
            else:
                self.divide(now)   # its share of what is left, until it uses enough to want more
        return member

    def _reclaims(self, member: Member, used: float, window: int, now: float) -> bool:
        """Whether `member`, using `used` in the current window, is taken to want its whole share: at
        once without classes below it. Else once `used` is `_RECLAIM_FLOOR` of that share's window, and,
        a lender measured already, once this window and the one before hold three of its windows'
        demand: a client that catches up after a stall (a window short, the next double) is not a
        class starting to offer more, and pre-empting the classes below for it would be for nothing."""
        if member.rank + 1 >= len(self.classes):
            return True
        if not member.fair:
            self.divide(now)
        if used <= _RECLAIM_FLOOR * member.fair / self._per_second:
            return False
        if member.trigger == INFINITE or member.demand == INFINITE or member.at != window:
            return True
        return used + member.usage(window - 1) > 3 * member.demand / self._per_second

    def _wants_share(self, member: Member, now: float) -> None:
        """`member` wants its whole share from now until a full window has measured it: divide now,
        which cuts the classes below it at once (counted as their pre-emptions)."""
        member.demand = INFINITE
        member.wants_from = self.index(now)
        member.last_use = now
        self.wanting_until = (member.wants_from + 2) / self._per_second - self._offset()
        if len(self.classes) <= member.rank + 1:
            self.divide(now)
            return
        before = self.class_allocations()
        self.divide(now)
        for rank, (old, new) in enumerate(zip(before, self.class_allocations(), strict=True)):
            if rank > member.rank and new < old * (1 - 1e-9):
                name = self.classes[rank].name
                self.preemptions[name] = self.preemptions.get(name, 0) + 1

    def class_allocations(self) -> list[float]:
        """Each class's allocation now: its members' allocations summed, by rank."""
        out = [0.0] * max(1, len(self.classes))
        for member in self.members.values():
            out[member.rank] += member.allocation
        return out

    def restart(self, member: Member, membership: Membership, now: float) -> None:
        """A new share or entity for a member (a reload); a new sensor if its algorithm changed."""
        member.membership = membership
        if member.sensor.algorithm != self._algorithm(membership):
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
        back = now - member.last_use >= self.span and member.held_until < now - self.span
        if back:   # active again from now: measured over the windows from this one, and given a share
            member.since, member.last_use = window, now
            member.fair = 0.0
        if (used[slot] + value > member.trigger or back) and self._reclaims(member, used[slot] + value, window, now):
            # Back after a span of silence, or a lender using twice what it was measured at within one
            # window: it wants its share back, now, before this charge is checked (the borrowers'
            # quotas shrink at once: "reallocation within a window reclaims it").
            self._wants_share(member, now)
        totals = self.totals[member.rank] if self.totals else None
        if not used[slot] and totals is not None:   # its first charge in this window
            totals.weight.record(member.membership.share.weight, now)
        if self.used_at != window:
            self._shift(window)
        if member.rank < len(self.bursts) and self.bursts[member.rank] > 0:
            # A burst class's use above its quota in this window, however let through (the quota's own
            # measurement or the credit): the classes below repay it (`_excess`).
            allowed = member.quota / self._per_second
            before = used[slot] + member.spent
            self.burst[slot] += max(0.0, before + value - allowed) - max(0.0, before - allowed)
        used[slot] += value
        member.last_use = now
        self.used[slot] += value
        if totals is not None:
            totals.total.record(value, now)
        t = member.sensor.charge(value, now)
        if t > 0 and self.observed:
            t = member.sensor.forgive(t, now)   # an observed pool enforces no debt: keep one span of it
        if t > 0 and member.credit > member.spent:
            t = self._spend(member, value, now)
        if t > 0 and member.quota <= 0 and now < self.wanting_until:
            # Pre-empted to 0 by a member that wants its whole share until it is measured: mute until
            # then, not for the whole span a quota of 0 asks (the class above may want far less).
            t = min(t, self.wanting_until - now)
        if t > 0:
            self._held(member, now, t, window)
        return t

    def _spend(self, member: Member, value: float, now: float) -> float:
        """A burst class's member over its quota: its credit pays for what it can of `value` (taken
        out of its measurement and its demand, and owed by the pool); returns the throttle left."""
        available = member.credit - member.spent
        if self._shared():
            fleet = member.sensor.measure(now)   # in a fleet each process lets it spend its part of the credit
            available *= min(1.0, member.sensor.local_rate(now) / fleet) if fleet > 0 else 1.0
        cover = min(value, available)
        if cover <= 0:
            return member.sensor.throttle(now)
        member.sensor.refund(cover, now)
        member.spent += cover
        member.used[member.slot] -= cover   # not its demand: a burst, not a rate it sustains
        return member.sensor.throttle(now)

    def refund(self, member: Member, value: float, now: float) -> None:
        """Take back a charge (a Fetch answered empty): the member did not get those units."""
        window = self.index(now)
        member.shift(window)
        member.used[member.slot] -= value
        if self.used_at == window:
            self.used[window % len(self.used)] -= value
        member.sensor.refund(value, now)
        if self.totals:
            self.totals[member.rank].total.record(-value, now)

    def _held(self, member: Member, now: float, throttle: float, window: int) -> None:
        until = now + throttle
        if until > member.held_until:
            member.held_until = until
        if member.held is not None and self.totals:
            # One mark per window the mute reaches into, so that the others see it held throughout.
            held = self.totals[member.rank].held
            last = min(self.index(until), window + self.settings.window_count + 1)
            step = 1.0 / self._per_second
            for n in range(last - window + 1):
                member.held.record(1.0, now + n * step)
                held.record(1.0, now + n * step)

    # -- division --------------------------------------------------------------------------------
    def _shift(self, window: int) -> None:
        """The pool's ring at `window`: windows skipped since count 0, each with the budget now in force."""
        size = len(self.used)
        for back in range(min(window - self.used_at, size)):
            self.used[(window - back) % size] = self.burst[(window - back) % size] = 0.0
            self.budgets[(window - back) % size] = self.budget
        self.used_at = window

    def _excess(self, window: int) -> float:
        """How much less to divide in `window`, per second, to repay the bursts: what burst classes used
        above their quotas in each window, evenly over the window_count - 1 windows after it (so the
        span that starts with a burst holds no more than the budget's worth), never more than what the
        pool used in the span's other windows beyond their budgets (the fleet's in cluster scope)."""
        if self.used_at != window:
            self._shift(window)
        size = len(self.used)
        windows = range(window - self.settings.window_count + 1, window)
        used = sum(self.used[w % size] for w in windows)
        if self._shared():
            for totals in self.totals:
                others = totals.total.others
                used += sum(others.get(w, 0.0) for w in windows)
        over = used - sum(self.budgets[w % size] for w in windows) / self._per_second
        burst = sum(self.burst[w % size] for w in windows) / (self.settings.window_count - 1)
        return max(0.0, min(over, burst) * self._per_second)

    def _shared(self) -> bool:
        return self.fleet is not None and self.fleet.shared

    def _accrue(self, member: Member, previous: int, window: int) -> None:
        """A burst class's member at a new window: credit += quota x the windows closed - what it used
        in them (spent credit included), kept within [0, what burst_seconds adds to its measurement]."""
        burst = self.bursts[member.rank] if member.rank < len(self.bursts) else 0.0
        if burst <= 0:
            member.credit = member.spent = 0.0
            return
        member.shift(window)
        first = max(previous, window - len(member.used) + 1, window - self.settings.window_count)
        used = sum(member.usage(w) for w in range(first, window))
        if self._shared():
            others = member.sensor.shared.others   # type: ignore[union-attr]
            used += sum(others.get(w, 0.0) for w in range(first, window))
        earned = member.quota * (window - first) / self._per_second
        # The quota's own measurement already lets a span (a token bucket) or all but one window of it
        # (the sampled rate) through at once: the credit is the rest of `burst_seconds`.
        own = self.span if member.sensor.bucket is not None else self.span - 1 / self._per_second
        cap = max(0.0, burst - own) * member.quota
        member.credit = min(cap, max(0.0, member.credit - member.spent + earned - used))
        member.spent = 0.0

    def reallocate(self, now: float, window: int | None = None) -> None:
        """Measure every member's demand over the last two windows, then divide the budget anew."""
        window = self.index(now) if window is None else window
        if window <= self.window:
            return
        previous, self.window = self.window, window
        last, before = window - 1, window - 2
        held_from = before / self._per_second - self._offset()   # when window `before` began, here
        shared = self._shared()
        ranks = max(1, len(self.classes))
        known: list[dict[int, float]] = [{} for _ in range(ranks)]   # fleet: the others' usage of members known here
        known_held: list[dict[int, float]] = [{} for _ in range(ranks)]
        known_weight = [0.0] * ranks         # the weights of known members the others charged last window
        first = window - self.settings.window_count   # the span: the complete windows first .. last
        bursting = any(b > 0 for b in self.bursts)
        for member in self.members.values():
            if bursting:
                self._accrue(member, previous if previous >= 0 else last, window)
            if (now - member.last_use >= self.span and member.held_until <= held_from
                    and not (shared and member.sensor.shared.others_active)):   # type: ignore[union-attr]
                member.demand = member.rate = 0.0   # silent for a span here and elsewhere: nothing to measure
                continue
            member.shift(window)
            used1, used2 = member.usage(last), member.usage(before)
            total = sum(member.used) - member.used[member.slot]
            held = member.held_until > held_from
            # A member here for less than a span is measured over the windows it was here for: over the
            # whole span it would read low, and a top class's member would keep reclaiming its share.
            seconds = min(self.span, max(1, window - member.since) / self._per_second)
            if shared:
                others = member.sensor.shared.others   # type: ignore[union-attr]
                used1, used2 = used1 + others.get(last, 0.0), used2 + others.get(before, 0.0)
                total += sum(used for w, used in others.items() if first <= w <= last)
                _add(known[member.rank], others)
                if others.get(last, 0.0) > 0:
                    known_weight[member.rank] += member.membership.share.weight
                marks = member.held.others             # type: ignore[union-attr]
                _add(known_held[member.rank], marks)
                held = held or any(marks.get(w, 0.0) > 0 for w in (before, last, window))
                if any(first <= w < member.since for w in others):
                    seconds = self.span                # the others served it before it came here
            member.rate = total / self.span
            if member.wants_from >= last:
                continue   # joined or came back in the last window: not measured whole yet, still wanting
            # Requests are lumpy: one request in two windows reads as twice the rate in one of them.
            # The rate over the span is smooth but slow to see a member go quiet: take the smaller.
            member.demand = INFINITE if held else min(max(used1, used2) * self._per_second, total / seconds)
        for rank, totals in enumerate(self.totals):
            totals.unseen = self._unseen(totals, window, known[rank], known_held[rank]) if shared else 0.0
            if totals.unseen:
                # As many as the weights the others charged beyond the known members (at least one).
                weights = totals.weight.others
                totals.unseen_weight = max(1.0, max(weights.get(last, 0.0), weights.get(before, 0.0))
                                           - known_weight[rank])
        if self.on_window is not None:   # adaptive: the law closes the window and says what to divide
            demand = sum(m.demand for m in self.members.values()) + self.unseen
            self.budget = min(self.ceiling, self.on_window(now, window, demand))
        if bursting:
            self.excess = self._excess(window)
        self.divide(now)

    def _unseen(self, totals: ClassTotals, window: int, known: dict[int, float], known_held: dict[int, float]) -> float:
        """Fleet: the demand of a class's members that only other processes know, from its totals less
        the known members', measured as a member's is (held, else the smaller of recent and span)."""
        marks = totals.held.others
        if any(marks.get(w, 0.0) > known_held.get(w, 0.0) + 0.5 for w in (window - 2, window - 1, window)):
            return INFINITE
        first = window - self.settings.window_count
        used = {w: u - known.get(w, 0.0) for w, u in totals.total.others.items() if first <= w < window}
        recent = max(used.get(window - 1, 0.0), used.get(window - 2, 0.0)) * self._per_second
        demand = min(recent, sum(used.values()) / self.span)
        return demand if demand > _UNSEEN_FLOOR * self.budget else 0.0

    def active(self, member: Member, now: float) -> bool:
        if member.demand > 0 or now - member.last_use < self.span:
            return True
        shared = member.sensor.shared
        return shared is not None and self._shared() and shared.others_active > 0

    def divide(self, now: float) -> None:
        """Divide the budget over the demands last measured: q = max(allocation, fair share).

        Members silent for a span, here and in the fleet, are left out (no share is kept for them);
        they take part again from their next charge, which divides at once. Burst credit being repaid
        a pool with a burst class takes `excess` back from allocations and fair shares alike, the
        lowest class first."""
        active = [m for m in self.members.values() if self.active(m, now)]
        claims = [Claim(m.membership.share.weight, m.demand, m.membership.share.min_share,
                        m.membership.share.max_share, m.rank) for m in active]
        for rank, totals in enumerate(self.totals):
            if totals.unseen:
                claims.append(Claim(totals.unseen_weight, totals.unseen, rank=rank))
        allocations = allocate(self.budget, claims, self.shares)
        shares = fair_shares(self.budget, claims, self.shares)
        if self.excess:
            allocations = cut_from_bottom(allocations, claims, self.excess, self.burst_rank)
            shares = cut_from_bottom(shares, claims, self.excess, self.burst_rank)
        twice = 2.0 / self._per_second
        for member in self.members.values():
            member.allocation = member.fair = 0.0   # the inactive keep their quota, and no share
        for member, a, g in zip(active, allocations, shares, strict=False):   # the unseen claims are last
            member.allocation, member.fair = a, g
            member.trigger = member.demand * twice if a < g else INFINITE
            quota = max(a, g)
            if quota != member.quota:
                member.quota = quota
                member.sensor.follow_limit(quota, now)

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
