"""An adaptive pool's effective budget: a control law on the upstream latency the pool's requests see.

The pool's configured budget is the ceiling; the law lowers the effective budget while the upstream
is slower than `target_latency` for the pool's requests, raises it while it is healthy, and never
goes below the floor. Updated once per quota window with that window's `WindowSignals`
(pools/upstream_signals.py) and the pool's demand; `now` is an argument, nothing here reads a clock.

The law's table and the reasons for its constants are in quotas/README.md ("Adaptive pools"). In
short: over target, ``B = min(B, D * (1 + τ/L) / 2)``, anchored on what the upstream delivered (D)
so that windows over target while a queue drains do not compound; healthy and busy, a slow start up
to `ssthresh` (never past 2 D), then a probe scaled by B and by the headroom under target, never
more than `PROBE` above D; idle, a decay towards 1.5 x demand; the upstream's own throttles,
timeouts and disconnects cut harder. Always ``floor <= B <= ceiling``. A change of 1% or more is
kept as a `BudgetChange` (old, new, why) for `kqp explain`.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kqp.quotas.pools.upstream_signals import LatencyHistogram, WindowSignals

__all__ = ["AdaptiveBudget", "AdaptiveState", "BudgetChange", "Reason", "adaptive_floor"]

MIN_SAMPLES = 5           # latency samples per broker before the median is trusted alone
HISTORY_WINDOWS = 4       # earlier windows that may top a broker's samples up to MIN_SAMPLES
DELIVERED_WINDOWS = 2     # D is the larger delivered rate of this many windows (one may be half empty)
GROWTH = 0.15             # the largest probe increase per window, at no latency at all
PROBE = 0.075             # how far ahead of the delivered rate a probe may go
SLOW_START_LEAD = 2.0     # ... and a slow start (BBR's startup runs 2.89x ahead of delivery)
HEADROOM = 1.5            # the budget may exceed the pool's demand by this factor before it is idle
IDLE_DECAY = 0.95         # per window, while idle
THROTTLE_BACKOFF = 0.9    # upstream throttle_time_ms: B = min(B, 0.9 D)
STRONG_BACKOFF = 0.5      # timeouts and disconnects: B = min(B, D) / 2 ...
STRONG_HOLD = 1.0         # ... at most once per this many seconds
EVENT_CHANGE = 0.01       # changes smaller than 1% are not events
DEFAULT_FLOOR_FRACTION = 0.01   # the floor when nothing sets one: B never reaches 0, from which no law climbs
EVENTS_KEPT = 64


class Reason(enum.StrEnum):
    """Why the budget changed (the `kqp explain` event's cause, a metric label)."""

    LATENCY = "latency"                     # the pool's upstream latency is over target
    STALLED = "stalled"                     # a broker answered nothing while a Produce waited > target
    UPSTREAM_THROTTLE = "upstream_throttle"
    TIMEOUTS = "timeouts"
    DISCONNECTS = "disconnects"
    SLOW_START = "slow_start"               # regaining the budget last known safe
    PROBE = "probe"                         # healthy: looking for more
    IDLE = "idle"                           # the pool uses much less than its budget
    RECONFIGURED = "reconfigured"           # a reload moved the ceiling or the floor


@dataclass(frozen=True, slots=True)
class BudgetChange:
    """One change of an adaptive budget, for `kqp explain`."""

    at: float
    old: float
    new: float
    reason: Reason
    latency: float | None       # the window's L (s), if it had one
    target: float

    def describe(self) -> str:
        """E.g. "budget 800,000 -> 301,316/s: latency over target (197 ms, target 100 ms)"."""
        shown = "no sample" if self.latency is None else f"{self.latency * 1000:.0f} ms"
        return (f"budget {self.old:,.0f} -> {self.new:,.0f}/s: {_SAID[self.reason]} ({shown}, "
                f"target {self.target * 1000:.0f} ms)")


_SAID = {
    Reason.LATENCY: "latency over target",
    Reason.STALLED: "a broker answers nothing",
    Reason.UPSTREAM_THROTTLE: "the upstream throttles",
    Reason.TIMEOUTS: "requests timed out",
    Reason.DISCONNECTS: "upstream disconnects",
    Reason.SLOW_START: "regaining the last safe budget",
    Reason.PROBE: "healthy, probing",
    Reason.IDLE: "the pool is idle",
    Reason.RECONFIGURED: "reloaded",
}


@dataclass(frozen=True, slots=True)
class AdaptiveState:
    """What metrics show of one adaptive budget."""

    effective: float
    ceiling: float
    floor: float
    target: float
    latency: float | None      # the last window's L (s); None if it had no sample
    delivered: float           # D, units/s
    ssthresh: float


def adaptive_floor(ceiling: float, min_share_sum: float = 0.0, min_budget: float | None = None) -> float:
    """The floor of a pool's adaptive budget: a configured `min_budget`, else the members' `min_share`
    sum times the ceiling, else 1% of the ceiling. A floor of 0 would be a trap (no multiplicative law
    climbs back from 0, and a quota of 0 blocks), so `min_budget: 0` means the default too."""
    if min_budget is not None and min_budget > 0:
        return min(ceiling, min_budget)
    if min_share_sum > 0:
        return min(ceiling, min_share_sum * ceiling)
    return ceiling * DEFAULT_FLOOR_FRACTION


class AdaptiveBudget:
    """One pool's effective budget under the law in the module docstring."""

    def __init__(self, ceiling: float, floor: float, target_latency: float, now: float) -> None:
        if not 0 < floor <= ceiling:
            raise ValueError(f"an adaptive budget needs 0 < floor <= ceiling, got {floor} and {ceiling}")
        if not target_latency > 0:
            raise ValueError(f"target latency must be > 0 s, got {target_latency}")
        self.ceiling, self.floor, self.target = float(ceiling), float(floor), float(target_latency)
        self.budget = self.floor
        self.ssthresh = self.ceiling        # the first slow start runs up to the ceiling
        self.latency: float | None = None
        self.delivered = 0.0
        self.reason: Reason | None = None   # why the last update moved the budget (None: it held)
        self._delivered: deque[float] = deque(maxlen=DELIVERED_WINDOWS)
        self._history: deque[Mapping[int, LatencyHistogram]] = deque(maxlen=HISTORY_WINDOWS)
        self._last_strong = now - STRONG_HOLD
        self.changes: deque[BudgetChange] = deque(maxlen=EVENTS_KEPT)

    # -- the law -------------------------------------------------------------------------------------
    def update(self, now: float, signals: WindowSignals, demand: float) -> float:
        """Close one window: its signals and the pool's demand (units/s) in, the new budget out."""
        latency, stalled = self._measure(signals)
        self._delivered.append(signals.delivered_rate)
        self.latency = latency
        self.delivered = delivered = max(self._delivered)
        budget, reason = self._decrease(now, signals, latency, stalled, delivered)
        if reason is None:
            budget, reason = self._increase(latency, delivered, demand)
        self._set(now, budget, reason)
        return self.budget

    def _measure(self, signals: WindowSignals) -> tuple[float | None, bool]:
        """The window's L (module docstring) and whether it comes from a stall rather than answers."""
        worst: float | None = None
        for broker, histogram in signals.latency.items():
            if histogram.total == 0:
                continue
            pooled = LatencyHistogram(histogram.counts)
            for earlier in reversed(self._history):   # newest first
                if pooled.total >= MIN_SAMPLES:
                    break
                if (more := earlier.get(broker)) is not None:
                    pooled.add(more)
            median = pooled.quantile(0.5)
            if median is not None and (worst is None or median > worst):
                worst = median
        self._history.append(signals.latency)
        if worst is None and signals.stalled > self.target:
            return signals.stalled, True
        return worst, False

    def _decrease(self, now: float, signals: WindowSignals, latency: float | None, stalled: bool,
                  delivered: float) -> tuple[float, Reason | None]:
        """The lowest budget any congestion signal asks for, and which one; (B, None) if none does."""
        anchor = delivered if delivered > 0 else self.budget
        best, why = self.budget, None
        strong = Reason.TIMEOUTS if signals.timeouts else Reason.DISCONNECTS if signals.disconnects else None
        if strong is not None:
            why = strong   # within the hold after the last one: no second cut, but no increase either
            if now - self._last_strong >= STRONG_HOLD:
                self._last_strong = now
                best = min(self.budget, anchor) * STRONG_BACKOFF
        if latency is not None and latency > self.target:
            # (1 + τ/L) / 2: L = 2τ gives 0.75, L = 10τ gives 0.55, L = 1.1τ gives 0.95.
            cut = min(self.budget, anchor * (1 + self.target / latency) / 2)
            if cut < best or why is None:
                best, why = min(best, cut), Reason.STALLED if stalled else Reason.LATENCY
        if signals.throttled:
            cut = min(self.budget, anchor * THROTTLE_BACKOFF)
            if cut < best or why is None:
                best, why = min(best, cut), Reason.UPSTREAM_THROTTLE
        if why is not None:
            self.ssthresh = max(self.floor, best)
        return best, why

    def _increase(self, latency: float | None, delivered: float, demand: float) -> tuple[float, Reason | None]:
        budget = self.budget
        if demand * HEADROOM < budget:
            return max(demand * HEADROOM, budget * IDLE_DECAY), Reason.IDLE
        if latency is None:
            return budget, None    # used, yet nothing answered this window: no news
        if budget < self.ssthresh:
            return min(2 * budget, self.ssthresh, max(budget, HEADROOM * demand),
                       max(budget, SLOW_START_LEAD * delivered)), Reason.SLOW_START
        headroom = (self.target - latency) / self.target   # 0 at the target, 1 at no latency
        return min(budget * (1 + GROWTH * headroom), max(budget, delivered * (1 + PROBE)),
                   max(budget, HEADROOM * demand)), Reason.PROBE

    def _set(self, now: float, budget: float, reason: Reason | None) -> None:
        old = self.budget
        self.budget = min(self.ceiling, max(self.floor, budget))
        self.reason = reason if self.budget != old else None
        if self.reason is not None and abs(self.budget - old) >= EVENT_CHANGE * old:
            self.changes.append(BudgetChange(now, old, self.budget, self.reason, self.latency, self.target))

    # -- settings and what is shown ------------------------------------------------------------------
    def reconfigure(self, now: float, ceiling: float, floor: float, target_latency: float) -> None:
        """A reload: new bounds apply at once (the budget is clamped into them), the state stays."""
        if not 0 < floor <= ceiling or not target_latency > 0:
            raise ValueError(f"invalid adaptive settings: floor {floor}, ceiling {ceiling}, target {target_latency}")
        self.ceiling, self.floor, self.target = float(ceiling), float(floor), float(target_latency)
        self.ssthresh = min(self.ceiling, max(self.floor, self.ssthresh))
        self._set(now, self.budget, Reason.RECONFIGURED)

    def snapshot(self) -> dict[str, Any]:
        """Everything the law carries from one window to the next, as plain values (a fleet keeps
        one in its store, pools/adaptive_fleet.py); the settings (ceiling, floor, target) are not in it."""
        return {"budget": self.budget, "ssthresh": self.ssthresh, "latency": self.latency,
                "delivered": list(self._delivered), "last_strong": self._last_strong,
                "reason": None if self.reason is None else str(self.reason),
                "history": [{str(broker): {str(b): n for b, n in h.counts.items()} for broker, h in window.items()}
                            for window in self._history]}

    def restore(self, now: float, snapshot: Mapping[str, Any]) -> None:
        """Take the state of `snapshot` (the fleet's); a move of the budget is an event like any."""
        self.ssthresh = min(self.ceiling, max(self.floor, float(snapshot["ssthresh"])))
        self.latency = snapshot["latency"]
        self._delivered = deque(snapshot["delivered"], maxlen=DELIVERED_WINDOWS)
        self.delivered = max(self._delivered, default=0.0)
        self._last_strong = float(snapshot["last_strong"])
        self._history = deque(({int(broker): LatencyHistogram({int(b): n for b, n in counts.items()})
                                for broker, counts in window.items()} for window in snapshot["history"]),
                              maxlen=HISTORY_WINDOWS)
        reason = snapshot["reason"]
        self._set(now, float(snapshot["budget"]), None if reason is None else Reason(reason))

    def state(self) -> AdaptiveState:
        return AdaptiveState(self.budget, self.ceiling, self.floor, self.target, self.latency, self.delivered,
                             self.ssthresh)
