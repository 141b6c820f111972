"""Adaptive pools at run time: per adaptive (pool, quota type), its signals, its law and its windows.

The law (pools/adaptive_law.py) and the signals (pools/upstream_signals.py) are pure; this is where they meet a
pool's ledger. An `AdaptivePool` holds a `SignalCollector`, fed by the proxy with every answered
request of a member, and an `AdaptiveBudget` (ceiling: the configured budget; floor:
`adaptive_floor`; target: `target_latency_ms`).

The law runs when the ledger closes a window, just before it divides (`PoolLedger.on_window`): on
the same windows as the division (fleet time's in cluster scope), from the charge path, with `now`
as an argument and no timer of its own, which would have to agree with the ledger on window
boundaries anyway. Idle windows are closed at the next charge (at most `CATCH_UP`) or by the upkeep;
a broker that answers nothing stops the charges, and the members' oldest unanswered Produce is then
the window's latency. In a fleet a `FleetBudget` replica reports each window and adopts the fleet's
state (pools/adaptive_fleet.py). Every function takes `now`; nothing reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kqp.quotas.fleet.ledger import FleetLedger
from kqp.quotas.model import QuotaSettings, QuotaType
from kqp.quotas.pools.adaptive_fleet import AdaptiveReply, AdaptiveRequest, FleetBudget, Report
from kqp.quotas.pools.adaptive_law import AdaptiveBudget, AdaptiveState, BudgetChange, Reason, adaptive_floor
from kqp.quotas.pools.ledger import PoolLedger
from kqp.quotas.pools.membership import static_keys
from kqp.quotas.pools.upstream_signals import SignalCollector, WindowSignals

__all__ = ["UNIT", "AdaptivePool", "AdaptiveView", "fleet_failed", "fleet_merge", "fleet_request"]

#: The unit a pool's quota type counts, as an index into the (bytes, records, batches, requests) the
#: proxy reports for each answered request.
UNIT = {QuotaType.PRODUCER_BYTE_RATE: 0, QuotaType.CONSUMER_BYTE_RATE: 0, QuotaType.PRODUCER_RECORD_RATE: 1,
        QuotaType.CONSUMER_RECORD_RATE: 1, QuotaType.PRODUCER_BATCH_RATE: 2, QuotaType.CONSUMER_BATCH_RATE: 2,
        QuotaType.REQUEST_RATE: 3}
CATCH_UP = 60   # idle windows closed at most at once: 0.95^60 = 5% of the budget is left by idle decay
PENDING_MAX = 60.0   # s: a send not heard of for this long is dropped (its answer was lost to kqp's view)


@dataclass(frozen=True, slots=True)
class AdaptiveView:
    """What metrics show of an adaptive pool: the law's state and its changes so far, by reason."""

    state: AdaptiveState
    changes: Mapping[str, int]


def bounds(ledger: PoolLedger, settings: QuotaSettings) -> tuple[float, float, float]:
    """The law's ceiling, floor and target (s) from the pool's config."""
    spec = ledger.pool.adaptive
    assert spec is not None
    ceiling = ledger.ceiling
    min_shares = sum(m.share.min_share for m in static_keys(settings, ledger.pool, ledger.quota_type).values())
    floor = adaptive_floor(ceiling, min(1.0, min_shares), spec.min_budget.get(str(ledger.quota_type)))
    return ceiling, floor, spec.target_latency_ms / 1000


class AdaptivePool:
    """One adaptive (pool, quota type): see the module docstring."""

    __slots__ = ("_seen", "collector", "counts", "fleet", "law", "ledger", "name", "pending", "unit", "window")

    def __init__(self, ledger: PoolLedger, settings: QuotaSettings, now: float) -> None:
        self.ledger = ledger
        self.name = f"{ledger.pool.name}:{ledger.quota_type}"
        self.unit = UNIT[ledger.quota_type]
        self.collector = SignalCollector()
        #: The members' Produce requests forwarded and not answered yet: a token -> when it was sent, the
        #: oldest first (for the stall signal: a broker that answers nothing is as slow as its oldest wait).
        self.pending: dict[object, float] = {}
        self.law = AdaptiveBudget(*bounds(ledger, settings), now=self._time(now))
        self.counts: dict[str, int] = dict.fromkeys(Reason, 0)   # changes of budget by reason: a counter
        self._seen: BudgetChange | None = None      # the last change counted
        self.window = ledger.index(now)   # the first window not closed yet
        fleet = ledger.fleet
        self.fleet: FleetBudget | None = None
        if fleet is not None:
            grace = grace_windows(fleet)
            self.fleet = FleetBudget(self.name, self.law, fleet.window_size, grace_windows=grace,
                                     keep_windows=keep_windows(fleet, grace))
        ledger.budget = self.law.budget   # a new pool starts at the floor (pools/adaptive_law.py)
        ledger.on_window = self.close

    def _time(self, now: float) -> float:
        """The law's clock: fleet time in a fleet (every replica's changes are dated alike), else the loop's."""
        fleet = self.ledger.fleet
        return now if fleet is None else now + fleet.offset

    def reconfigure(self, settings: QuotaSettings, now: float) -> None:
        """A reload kept the pool: new bounds at once, the law's state kept."""
        ceiling, floor, target = bounds(self.ledger, settings)
        self.law.reconfigure(self._time(now), ceiling, floor, target)
        self.ledger.budget = self.law.budget
        self.ledger.on_window = self.close

    # -- what the proxy reports ------------------------------------------------------------------
    def observe(self, now: float, broker: int, latency: float | None, units: tuple[float, float, float, float],
                upstream_throttle_ms: int) -> None:
        """A member's request answered at `now`: its latency (None: not the broker's, e.g. a Fetch that
        may have waited), its (bytes, records, batches, requests), the upstream's throttle on it. An
        answer that is the first event of a window closes the window before (it belongs to this one)."""
        ledger = self.ledger
        if ledger.index(now) > ledger.window:
            ledger.reallocate(now)
        self.collector.response(broker, latency, units[self.unit], upstream_throttle_ms)

    def sent(self, token: object, at: float) -> None:
        """A member's Produce forwarded at `at` (`token` names it until `answered`)."""
        self.pending[token] = at

    def answered(self, token: object) -> None:
        """That Produce was answered, or will never be (its connection closed)."""
        self.pending.pop(token, None)

    def _stalled(self, now: float) -> float:
        """The oldest unanswered Produce's age (0: none); sends older than `PENDING_MAX` are forgotten."""
        pending = self.pending
        while pending:
            token, at = next(iter(pending.items()))
            if now - at <= PENDING_MAX:
                return max(0.0, now - at)
            del pending[token]
        return 0.0

    def timeouts(self, count: int) -> None:
        for _ in range(count):
            self.collector.timeout()

    def disconnect(self) -> None:
        self.collector.disconnect()

    # -- the window step (PoolLedger.on_window) ----------------------------------------------------
    def close(self, now: float, window: int, demand: float) -> float:
        """Windows up to `window` (exclusive) have ended: the law closes them; returns the budget.

        Usually one window. After windows in which no member charged (all idle, or all muted by a
        throttle), what was answered meanwhile is one window of the law spanning them all (its
        delivered rate is per second of the span); if nothing was answered, each is closed on its
        own, with the demand just measured (0 when the pool was idle: each decays; unbounded when a
        throttle held a member back: each holds). A fleet's reports are per window: what was answered
        goes with the last."""
        first, last = self.window, window - 1
        if last < first:
            return self.law.budget
        self.window = window
        seconds = self.ledger.settings.window_size_seconds
        gap = last - first + 1
        if self.fleet is None and gap > 1 and not self.collector.empty:
            self.law.update((last + 1) * seconds, self.collector.take(gap * seconds, self._stalled(now)), demand)
            return self.counted()
        for idle in range(max(first, last - CATCH_UP), last):
            self._close_one(idle, WindowSignals(seconds), demand)
        self._close_one(last, self.collector.take(seconds, self._stalled(now)), demand)
        return self.counted()

    def _close_one(self, window: int, signals: WindowSignals, demand: float) -> None:
        fleet = self.ledger.fleet
        if self.fleet is None or fleet is None:
            self.law.update((window + 1) * self.ledger.settings.window_size_seconds, signals, demand)
            return
        # The ledger's demand is the fleet's while shared: this process reports its part of it.
        n = fleet.instances if fleet.shared else 1
        self.fleet.close_window(window, Report(signals, demand / max(1, n)))

    # -- what is shown -----------------------------------------------------------------------------
    def counted(self) -> float:
        """Count the law's changes since the last call, by reason; returns the budget."""
        changes, seen = self.law.changes, self._seen
        for change in reversed(changes):
            if change is seen:
                break
            self.counts[change.reason] = self.counts.get(change.reason, 0) + 1
        self._seen = changes[-1] if changes else None
        return self.law.budget

    def view(self) -> AdaptiveView:
        return AdaptiveView(self.law.state(), dict(self.counts))

    def changes(self, now: float) -> list[BudgetChange]:
        """The law's recent changes of budget, dated on the loop's clock (the caller's `now`)."""
        shift = self._time(now) - now
        return [c if not shift else BudgetChange(c.at - shift, c.old, c.new, c.reason, c.latency, c.target)
                for c in self.law.changes]


# -- the fleet exchange's part (run by the proxy's fleet driver beside the usage exchange) -----------
def grace_windows(fleet: FleetLedger) -> int:
    """A window is closed for the fleet once every process has reported it: one sync interval and a
    window's slack after its end."""
    return math.ceil(fleet.sync_interval / fleet.window_size) + 1


def keep_windows(fleet: FleetLedger, grace: int) -> int:
    return max(10 * grace, 2 * fleet.window_count)


def fleet_request(pools: Iterable[AdaptivePool], fleet: FleetLedger, now: float) -> AdaptiveRequest | None:
    """What this process sends for its adaptive pools (None: it has none). Every window up to `now`
    is closed first, idle ones too: an idle pool's budget decays only if its windows reach the law."""
    mine = [p for p in pools if p.fleet is not None]
    if not mine:
        return None
    for pool in mine:
        pool.ledger.reallocate(now)
    grace = grace_windows(fleet)
    return AdaptiveRequest(fleet.instance, fleet.window_ms, grace, keep_windows(fleet, grace),
                           tuple(p.fleet.collect() for p in mine))   # type: ignore[union-attr]


def fleet_merge(pools: Iterable[AdaptivePool], request: AdaptiveRequest, reply: AdaptiveReply, instances: int,
                now: float) -> None:
    """The store's answer: each replica adopts the fleet's state and advances it; the pool divides the
    result at once."""
    by_name = {p.name: p for p in pools if p.fleet is not None}
    for sent, view in zip(request.budgets, reply.budgets, strict=True):
        pool = by_name.get(sent.name)
        if pool is not None and pool.fleet is not None:
            pool.fleet.merge(view, reply.now, instances)
            pool.ledger.set_budget(pool.counted(), now)


def fleet_failed(pools: Iterable[AdaptivePool]) -> None:
    for pool in pools:
        if pool.fleet is not None:
            pool.fleet.failed()
