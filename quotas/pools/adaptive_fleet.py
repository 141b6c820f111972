"""One adaptive budget for a fleet: every process reports its windows, one law state lives in the store.

Each kqp process sees only its own clients' requests; N processes each running the law on their
own 1/N of the evidence would find N different limits, so the fleet runs ONE law. When a window
(fleet time) ends, each process queues a `Report` (its `WindowSignals` and its members' demand) for
the next exchanges. The store holds the law's state and `applied`, the last window folded in, and
answers with the state and the reports of the windows closed since (`grace_windows`, more than one
sync interval). Whoever sees closed windows first merges their reports (histograms add up), runs
the law, uses the result at once and proposes it; the store takes a proposal only if it starts from
the `applied` it holds (compare-and-set), and the others adopt it.

No leader, no lease, the law only here in Python: the store keeps strings and compares two integers
(`AdaptiveStore` is that store in memory, the specification a Redis script follows). Alone, a
process runs the law on its own windows read as N times its own while the pool enforces B / N.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kqp.quotas.pools.adaptive_law import AdaptiveBudget
from kqp.quotas.pools.upstream_signals import LatencyHistogram, WindowSignals

__all__ = ["AdaptiveReply", "AdaptiveRequest", "AdaptiveStore", "BudgetExchange", "BudgetView", "FleetBudget",
           "Proposal", "Report", "decode_report", "encode_report"]

NONE = -1   # `applied` before any state exists


@dataclass(frozen=True, slots=True)
class Report:
    """One process's window of one adaptive budget."""

    signals: WindowSignals
    demand: float    # units/s this process's members offered; inf while a throttle held one back


def encode_report(report: Report) -> str:
    s = report.signals
    return json.dumps({"d": s.delivered, "u": report.demand, "t": s.throttled, "o": s.timeouts, "x": s.disconnects,
                       "s": s.stalled, "l": {str(b): {str(k): n for k, n in h.counts.items()}
                                             for b, h in s.latency.items()}}, separators=(",", ":"))


def decode_report(text: str, seconds: float) -> Report:
    raw = json.loads(text)
    latency = {int(b): LatencyHistogram({int(k): n for k, n in counts.items()}) for b, counts in raw["l"].items()}
    return Report(WindowSignals(seconds, latency, raw["d"], raw["t"], raw["o"], raw["x"], raw["s"]), raw["u"])


def merged(reports: list[Report]) -> Report:
    """A window of the fleet: the processes' signals added up, their demands too."""
    return Report(WindowSignals.merged(r.signals for r in reports), sum(r.demand for r in reports))


@dataclass(frozen=True, slots=True)
class Proposal:
    after: int     # the `applied` of the state it was computed from (NONE: there was none)
    applied: int   # the last window folded into `state`
    state: str


@dataclass(frozen=True, slots=True)
class BudgetExchange:
    """What one process sends for one adaptive budget."""

    name: str
    reports: tuple[tuple[int, str], ...]   # (window, encoded report) not yet folded in
    proposal: Proposal | None = None


@dataclass(frozen=True, slots=True)
class AdaptiveRequest:
    instance: str
    window_ms: int        # part of the store's key: differently configured fleets never mix
    grace_windows: int    # a window is closed this many windows after the one it is in
    keep_windows: int     # reports older than this many windows are dropped
    budgets: tuple[BudgetExchange, ...]


@dataclass(frozen=True, slots=True)
class BudgetView:
    """The store's answer for one budget: its state and the closed windows not folded into it yet."""

    applied: int
    state: str | None
    closed: Mapping[int, tuple[str, ...]] = field(default_factory=dict)   # window -> every report of it


@dataclass(frozen=True, slots=True)
class AdaptiveReply:
    now: float     # the store's clock (fleet time), seconds
    budgets: tuple[BudgetView, ...]


@dataclass
class _Entry:
    applied: int = NONE
    state: str | None = None
    reports: dict[int, dict[str, str]] = field(default_factory=dict)   # window -> instance -> report


class AdaptiveStore:
    """The store's side in memory (the module docstring's steps 1-3); a Redis script does the same."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, str], _Entry] = {}

    def exchange(self, request: AdaptiveRequest, now: float) -> AdaptiveReply:
        current = math.floor(now * 1000 / request.window_ms)
        views: list[BudgetView] = []
        for budget in request.budgets:
            entry = self._entries.setdefault((request.window_ms, budget.name), _Entry())
            proposal = budget.proposal
            if proposal is not None and proposal.after == entry.applied and proposal.applied > entry.applied:
                entry.applied, entry.state = proposal.applied, proposal.state
            for window, text in budget.reports:
                if window > entry.applied:
                    entry.reports.setdefault(window, {})[request.instance] = text
            oldest = current - request.keep_windows
            for window in [w for w in entry.reports if w <= entry.applied or w < oldest]:
                del entry.reports[window]
            last_closed = current - request.grace_windows
            # Sorted by instance: every process folds the same numbers in the same order (same floats).
            views.append(BudgetView(entry.applied, entry.state, {
                w: tuple(entry.reports[w][i] for i in sorted(entry.reports[w]))
                for w in sorted(entry.reports) if w <= last_closed}))
        return AdaptiveReply(now, tuple(views))

    def forget(self) -> None:
        """Everything is lost (a Redis restarted without persistence)."""
        self._entries.clear()


class FleetBudget:
    """One adaptive budget's replica in one process (module docstring).

    The process reports every window of every adaptive budget it is configured with, idle ones too
    (demand 0): an idle pool's budget decays only if its windows reach the law.
    """

    def __init__(self, name: str, law: AdaptiveBudget, window_seconds: float, *, grace_windows: int,
                 keep_windows: int) -> None:
        self.name = name
        self.law = law
        self.window = window_seconds
        self.grace_windows = grace_windows
        self.keep_windows = keep_windows
        self.applied = NONE       # the last window folded into the law's state here
        self.shared = False
        self.divisor = 1          # the instances the last exchange counted (alone: the share)
        self._pending: dict[int, str] = {}
        self._proposal: Proposal | None = None
        self._alone = NONE        # the last window the law ran on here, alone

    @property
    def budget(self) -> float:
        return self.law.budget

    def end_of(self, window: int) -> float:
        return (window + 1) * self.window

    def close_window(self, window: int, report: Report) -> float:
        """This process's window `window` ended; alone, the law runs on it here (scaled by N)."""
        self._pending[window] = encode_report(report)
        if not self.shared:
            n = self.divisor
            scaled = replace(report.signals, delivered=report.signals.delivered * n)
            self.law.update(self.end_of(window), scaled, report.demand * n)
            self._alone = window
        return self.law.budget

    def collect(self) -> BudgetExchange:
        reports = tuple(sorted((w, text) for w, text in self._pending.items() if w > self.applied))
        return BudgetExchange(self.name, reports, self._proposal)

    def merge(self, view: BudgetView, now: float, instances: int) -> None:
        """The store's answer (`now`: its clock): adopt its state, advance it over the closed windows."""
        self.divisor = max(1, instances)
        current = math.floor(now / self.window)
        # No state, or one nobody advanced for longer than reports are kept (the store was lost, or
        # unreachable for everyone): this process's own law, run alone meanwhile, goes on from here.
        stale = view.state is None or view.applied < current - self.keep_windows
        if not stale:
            assert view.state is not None
            self.law.restore(self.end_of(view.applied), json.loads(view.state))
        after = folded = view.applied
        # A stale state is not restored: the law here already holds the windows it ran alone.
        skip = max(after, self._alone) if stale else after
        for window in sorted(view.closed):
            if window > skip:
                fleet = merged([decode_report(text, self.window) for text in view.closed[window]])
                self.law.update(self.end_of(window), fleet.signals, fleet.demand)
                skip = folded = window
        if stale:
            folded = max(folded, self._alone, current - self.grace_windows)
        self._proposal = Proposal(after, folded, json.dumps(self.law.snapshot())) if folded > after else None
        self.applied = folded
        for window in [w for w in self._pending if w <= folded]:
            del self._pending[window]
        self.shared = True

    def failed(self) -> None:
        """The exchange failed: go alone until the next one succeeds (reports stay queued)."""
        self.shared = False
        self._proposal = None
