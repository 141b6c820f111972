"""Every pool of a quota manager: which pool ledger each request is charged to, and their life.

`Pools` holds one `PoolLedger` per (pool, quota type) and answers the manager's per-request
question in one cached lookup: for this principal and this `ChargeKind` (a Produce, a Fetch
response, a request), which ledgers, as which member, with which of the call's values. A principal
in no pool costs that lookup; with no pool configured the manager does not even ask (`kinds`).
Topic pools are charged by `charge_topics`, which the proxy calls only while `topic_types` is not
empty. On new settings (`update`) a ledger whose pool and type persist keeps its members'
measurements; new quota windows restart everything. Time is always an argument.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kqp.quotas.fleet.ledger import FleetLedger
from kqp.quotas.model import ChargeKind, EntitySpec, Principal, QuotaKey, QuotaSettings, QuotaType
from kqp.quotas.pools.adaptive import AdaptivePool, AdaptiveView
from kqp.quotas.pools.adaptive_law import BudgetChange
from kqp.quotas.pools.allocation import INFINITE
from kqp.quotas.pools.ledger import Member, PoolLedger
from kqp.quotas.pools.membership import Membership, counts_for, membership, share_of, static_keys
from kqp.quotas.pools.spec import PoolSpec
from kqp.quotas.rates.sensor import QuotaSensor
from kqp.quotas.rates.throttle import Violation

_ANSWERED = (ChargeKind.PRODUCE, ChargeKind.FETCH)   # the kinds whose answers adaptive pools watch
MAX_CACHED = 65536   # principals or topic names, as entities.py bounds its cache

Entry = tuple[PoolLedger, Membership, int]   # a ledger, the member charged, the index of its value


@dataclass(frozen=True, slots=True)
class MemberState:
    """One member as metrics and `kqp top` show it (rates in the quota's unit per second)."""

    key: QuotaKey
    entity: EntitySpec | None
    weight: float
    usage: float          # its rate over the last span's complete windows (the fleet's in cluster scope)
    demand: float         # inf while a pool throttle holds it back
    allocation: float     # the quota it is held to: max(max-min allocation, fair share)
    fair_share: float     # what it gets if every member wants without limit
    borrowed: float       # allocation above its fair share: other members' unused shares
    service_class: str | None = None   # its class (None: the pool has no classes)
    credit: float = 0.0   # a burst class's member: the quota it saved, in the quota's unit


@dataclass(frozen=True, slots=True)
class ClassState:
    """One class of a pool, its members summed (rates in the quota's unit per second)."""

    name: str
    rank: int             # 0 is served first
    max_share: float
    burst_seconds: float
    members: int          # members taking part in the division
    allocation: float     # the members' max-min allocations
    demand: float         # inf while a pool throttle holds one of them back
    delivered: float      # what the members moved, over the last span's complete windows
    preemptions: int      # divisions that cut the class at once for a higher class's member


@dataclass(frozen=True, slots=True)
class PoolState:
    name: str
    quota_type: QuotaType
    budget: float         # the budget divided now (an adaptive pool's may be below its ceiling)
    ceiling: float        # the configured budget
    usage: float          # the members' usage, and unseen members' (cluster scope)
    lent: float           # what members using less than their fair share lend the others
    topics: tuple[str, ...]
    members: tuple[MemberState, ...]
    adaptive: AdaptiveView | None = None   # an adaptive pool's law: target, latency, changes
    observed: bool = False                 # mode observe: its throttles are counted, never acted on
    classes: tuple[ClassState, ...] = ()


class Pools:
    """The pools of one settings generation, their ledgers and the per-principal lookups."""

    def __init__(self, settings: QuotaSettings, now: float, fleet: FleetLedger | None = None) -> None:
        self._fleet = fleet
        self.ledgers: dict[tuple[str, QuotaType], PoolLedger] = {}
        self.adaptive: dict[tuple[str, QuotaType], AdaptivePool] = {}
        self._build(settings, now)

    def _build(self, settings: QuotaSettings, now: float) -> int:
        """New settings over the current ledgers; returns how many members were released."""
        self.settings = settings
        old, released = self.ledgers, 0
        old_adaptive, self.adaptive = self.adaptive, {}
        self.ledgers = {}
        for pool in settings.pools:
            for quota_type in map(QuotaType, pool.budgets):
                key = (pool.name, quota_type)
                ledger = old.pop(key, None)
                if ledger is None:
                    ledger = PoolLedger(pool, quota_type, settings, now, self._fleet)
                else:
                    released += _carry_over(ledger, pool, settings, now)
                self.ledgers[key] = ledger
                ledger.on_window = None
                ledger.observed = settings.observes_pool(pool)
                if pool.adaptive is not None:
                    self.adaptive[key] = _adaptive(old_adaptive.get(key), ledger, settings, now)
                if self._fleet is not None:
                    self._watch_static(ledger, now)
                ledger.divide(now)
        for ledger in old.values():
            released += len(ledger.members)
            for key in list(ledger.members):
                ledger.forget(key)
        principal = [ledger for ledger in self.ledgers.values() if not ledger.pool.topics]
        #: Per `ChargeKind`: whether a principal pool charges it at all.
        self.kinds = tuple(any(ledger.quota_type in {t for t, _ in kind.types} for ledger in principal)
                           for kind in ChargeKind)
        self.topic_types = frozenset(ledger.quota_type for ledger in self.ledgers.values() if ledger.pool.topics)
        #: (Produce, Fetch): whether an adaptive pool may watch a principal's answered requests of the kind.
        self.watch_kinds = tuple(any(a.ledger.quota_type in {t for t, _ in kind.types} | {QuotaType.REQUEST_RATE}
                                     for a in self.adaptive.values()) for kind in _ANSWERED)
        #: (Produce, Fetch): whether the proxy must look further into the kind at all, for a topic pool
        #: of its byte rate or an adaptive pool watching it (else it reads headers and sizes only).
        self.reads = (QuotaType.PRODUCER_BYTE_RATE in self.topic_types or self.watch_kinds[0],
                      QuotaType.CONSUMER_BYTE_RATE in self.topic_types or self.watch_kinds[1])
        self._watch: dict[Principal, tuple[tuple[AdaptivePool, ...], tuple[AdaptivePool, ...]]] = {}
        self._entries: dict[Principal, tuple[tuple[Entry, ...], ...]] = {}
        self._topic_members: dict[Principal, dict[PoolLedger, Membership]] = {}
        self._covering: dict[tuple[QuotaType, str], tuple[PoolLedger, ...]] = {}
        return released

    def _watch_static(self, ledger: PoolLedger, now: float) -> None:
        """Cluster scope: the members the config names are read from the fleet from the start."""
        wanted = static_keys(self.settings, ledger.pool, ledger.quota_type)
        for key, member in ledger.members.items():
            member.static = key in wanted
        for key, found in wanted.items():
            if key not in ledger.members:
                ledger.add(found, now, static=True)

    def update(self, settings: QuotaSettings, now: float, restart: bool = False) -> list[str]:
        """Swap settings; `restart` (new quota windows): every pool measures afresh."""
        if restart:
            released = sum(len(ledger.members) for ledger in self.ledgers.values())
            self.ledgers, self.adaptive = {}, {}   # the fleet ledger has forgotten every sensor already
            self._build(settings, now)
        else:
            released = self._build(settings, now)
        return [f"released {released} pool member(s) whose pool or entity no longer applies"] if released else []

    # -- the per-request path ----------------------------------------------------------------------
    def _entries_of(self, p: Principal) -> tuple[tuple[Entry, ...], ...]:
        found = self._entries.get(p)
        if found is None:   # once per principal and settings: every later request is this one lookup
            if len(self._entries) >= MAX_CACHED:
                self._entries.clear()
            per_kind: list[tuple[Entry, ...]] = []
            for kind in ChargeKind:
                index = dict(kind.types)
                per_kind.append(tuple(
                    (ledger, membership(self.settings, ledger.quota_type, p), index[ledger.quota_type])
                    for ledger in self.ledgers.values()
                    if ledger.quota_type in index and not ledger.pool.topics
                    and ledger.pool.selects(p.user, p.client_id)))
            found = self._entries[p] = tuple(per_kind)
        return found

    @staticmethod
    def _member(ledger: PoolLedger, found: Membership, now: float) -> Member:
        member = ledger.members.get(found.key)
        return ledger.add(found, now) if member is None else member

    def charge(self, p: Principal, kind: ChargeKind, values: tuple[float, ...], now: float,
               out: list[Violation]) -> None:
        """Charge `values` (in `kind.types`' order) to `p`'s pools; violations go to `out`."""
        for ledger, found, index in self._entries_of(p)[kind]:
            member = ledger.members.get(found.key)
            if member is None:
                member = ledger.add(found, now)
            t = ledger.charge(member, values[index], now)
            if t > 0:
                out.append(member.sensor.violation(ledger.quota_type, found.key, values[index], t, now,
                                                   ledger.pool.name, ledger.observed))

    def refund(self, p: Principal, kind: ChargeKind, values: tuple[float, ...], now: float) -> None:
        for ledger, found, index in self._entries_of(p)[kind]:
            member = ledger.members.get(found.key)
            if member is not None:
                ledger.refund(member, values[index], now)

    def pools_of(self, p: Principal, kind: ChargeKind) -> tuple[PoolLedger, ...]:
        """The principal pools that charge `p`'s requests of `kind` (to attribute, say, their latency)."""
        return tuple(ledger for ledger, _, _ in self._entries_of(p)[kind])

    def watching(self, p: Principal, kind: ChargeKind) -> tuple[AdaptivePool, ...]:
        """The adaptive pools that `p`'s answered requests of `kind` (PRODUCE or FETCH) report to: its
        principal pools of that kind's types, and of request_rate."""
        found = self._watch.get(p)
        if found is None:
            if len(self._watch) >= MAX_CACHED:
                self._watch.clear()
            entries = self._entries_of(p)
            requests = entries[ChargeKind.REQUEST]
            found = self._watch[p] = tuple(tuple(
                self.adaptive[key] for key in dict.fromkeys((ledger.pool.name, ledger.quota_type)
                                                            for ledger, _, _ in (*entries[k], *requests))
                if key in self.adaptive) for k in _ANSWERED)
        return found[kind]

    def adaptive_changes(self, now: float) -> dict[str, list[tuple[QuotaType, BudgetChange]]]:
        """Each adaptive pool's recent changes of budget, oldest first, dated on the clock of `now`
        (for `kqp explain`: `BudgetChange.describe()` says each in a line)."""
        out: dict[str, list[tuple[QuotaType, BudgetChange]]] = {}
        for (name, quota_type), pool in self.adaptive.items():
            out.setdefault(name, []).extend((quota_type, change) for change in pool.changes(now))
        for changes in out.values():
            changes.sort(key=lambda item: item[1].at)
        return out

    def applies(self, p: Principal, types: frozenset[QuotaType], enforced: bool = False) -> bool:
        """Whether a principal pool of one of `types` takes `p` (`enforced`: a pool not observed)."""
        return any(ledger.quota_type in types and not (enforced and ledger.observed)
                   for entries in self._entries_of(p) for ledger, _, _ in entries)

    def quota(self, p: Principal, quota_type: QuotaType, enforced: bool = False) -> float | None:
        """`p`'s member's quota in its pool of `quota_type` (the budget before it joined), or None
        (`enforced`: None for an observed pool)."""
        for entries in self._entries_of(p):
            for ledger, found, _ in entries:
                if ledger.quota_type == quota_type:
                    if enforced and ledger.observed:
                        return None
                    member = ledger.members.get(found.key)
                    return ledger.budget if member is None else member.quota
        return None

    def sensor(self, p: Principal, quota_type: QuotaType) -> QuotaSensor | None:
        """The sensor of `p`'s member in its pool of `quota_type`, once it has one."""
        for entries in self._entries_of(p):
            for ledger, found, _ in entries:
                if ledger.quota_type == quota_type:
                    member = ledger.members.get(found.key)
                    return None if member is None else member.sensor
        return None

    # -- topic pools -------------------------------------------------------------------------------
    def _topic_pools(self, p: Principal) -> dict[PoolLedger, Membership]:
        found = self._topic_members.get(p)
        if found is None:
            if len(self._topic_members) >= MAX_CACHED:
                self._topic_members.clear()
            found = self._topic_members[p] = {
                ledger: membership(self.settings, ledger.quota_type, p) for ledger in self.ledgers.values()
                if ledger.pool.topics and ledger.pool.selects(p.user, p.client_id)}
        return found

    def _pools_of_topic(self, quota_type: QuotaType, topic: str) -> tuple[PoolLedger, ...]:
        key = (quota_type, topic)
        found = self._covering.get(key)
        if found is None:
            if len(self._covering) >= MAX_CACHED:
                self._covering.clear()
            found = self._covering[key] = tuple(
                ledger for ledger in self.ledgers.values()
                if ledger.quota_type == quota_type and ledger.pool.topics and ledger.pool.covers(topic))
        return found

    def wants_topics(self, p: Principal, quota_type: QuotaType, enforced: bool = False) -> bool:
        """Whether a topic pool of `quota_type` takes `p` (else its topics need not be read;
        `enforced`: a pool not observed)."""
        return quota_type in self.topic_types and any(
            ledger.quota_type == quota_type and not (enforced and ledger.observed) for ledger in self._topic_pools(p))

    def charge_topics(self, p: Principal, quota_type: QuotaType, sizes: Iterable[tuple[str, int]], now: float,
                      refund: bool = False) -> list[Violation]:
        """Charge each topic's bytes to the topic pool that covers it for `p` (`refund`: take them back)."""
        if quota_type not in self.topic_types:
            return []
        mine = self._topic_pools(p)
        if not mine:
            return []
        totals: dict[PoolLedger, float] = {}
        for topic, nbytes in sizes:
            for ledger in self._pools_of_topic(quota_type, topic):
                if ledger in mine:
                    totals[ledger] = totals.get(ledger, 0.0) + nbytes
        out: list[Violation] = []
        for ledger, nbytes in totals.items():
            found = mine[ledger]
            member = self._member(ledger, found, now)
            if refund:
                ledger.refund(member, nbytes, now)
                continue
            t = ledger.charge(member, nbytes, now)
            if t > 0:
                out.append(member.sensor.violation(quota_type, found.key, nbytes, t, now, ledger.pool.name,
                                                   ledger.observed))
        return out

    # -- upkeep and views --------------------------------------------------------------------------
    def set_budget(self, pool: str, quota_type: QuotaType, budget: float, now: float) -> None:
        """The budget `pool` divides for `quota_type` from now on (the adaptive hook)."""
        self.ledgers[(pool, quota_type)].set_budget(budget, now)

    def expire(self, now: float, idle_seconds: float) -> int:
        """Drop idle members; and the process's periodic upkeep (every second at most) closes adaptive
        pools' windows that no charge or answer closed: a broker answering nothing stalls the charges."""
        for pool in self.adaptive.values():
            pool.ledger.reallocate(now)
        return sum(ledger.expire(now, idle_seconds) for ledger in self.ledgers.values())

    @property
    def member_count(self) -> int:
        return sum(len(ledger.members) for ledger in self.ledgers.values())

    def snapshot(self, now: float) -> list[PoolState]:
        """Every pool's budget and usage and its members' division, brought up to `now`'s window."""
        out: list[PoolState] = []
        for ledger in self.ledgers.values():
            ledger.reallocate(now)
            names = [c.name for c in ledger.classes]
            active = [m for m in ledger.members.values() if ledger.active(m, now)]
            members = tuple(MemberState(
                m.membership.key, m.membership.entity, m.membership.share.weight, m.rate, m.demand, m.quota,
                m.fair, m.borrowed, names[m.rank] if names else None, m.credit) for m in active)
            adaptive = self.adaptive.get((ledger.pool.name, ledger.quota_type))
            out.append(PoolState(ledger.pool.name, ledger.quota_type, ledger.budget, ledger.ceiling,
                                 sum(m.usage for m in members) + ledger.unseen, ledger.lent, ledger.pool.topics,
                                 members, None if adaptive is None else adaptive.view(),
                                 observed=ledger.observed, classes=_classes(ledger, active)))
        return out


def _classes(ledger: PoolLedger, active: list[Member]) -> tuple[ClassState, ...]:
    out = []
    for rank, c in enumerate(ledger.classes):
        mine = [m for m in active if m.rank == rank]
        unseen = ledger.totals[rank].unseen if len(ledger.totals) > rank else 0.0
        out.append(ClassState(c.name, rank, c.max_share, c.burst_seconds, len(mine),
                              sum(m.allocation for m in mine), sum(m.demand for m in mine) + unseen,
                              sum(m.rate for m in mine) + (0.0 if unseen == INFINITE else unseen),
                              ledger.preemptions.get(c.name, 0)))
    return tuple(out)


def _adaptive(found: AdaptivePool | None, ledger: PoolLedger, settings: QuotaSettings, now: float) -> AdaptivePool:
    """An adaptive pool's law: the one it had, with the new settings, while its ledger persists."""
    if found is None or found.ledger is not ledger:
        return AdaptivePool(ledger, settings, now)
    found.reconfigure(settings, now)
    return found


def _carry_over(ledger: PoolLedger, pool: PoolSpec, settings: QuotaSettings, now: float) -> int:
    """A persisting pool under new settings: new budget and shares, the same measurements."""
    ledger.pool, ledger.settings = pool, settings
    ledger.ceiling = pool.budgets[ledger.quota_type]
    ledger.budget = min(ledger.budget, ledger.ceiling) if pool.adaptive is not None else ledger.ceiling
    released = 0
    for key, member in list(ledger.members.items()):
        entity = member.membership.entity
        if entity is not None and not counts_for(settings, ledger.quota_type, entity):
            ledger.forget(key)
            released += 1
            continue
        ledger.restart(member, Membership(key, entity, share_of(settings, entity)), now)
    ledger.set_classes(pool, now)   # members keep their measurements and credit in their new class
    return released
