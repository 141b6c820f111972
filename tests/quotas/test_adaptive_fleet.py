"""One adaptive budget for a fleet: reports per window, one law state in the store, first proposal wins.

Processes here are `FleetBudget` replicas on a simulated clock, sharing an in-memory `AdaptiveStore`
(the specification the Redis side follows). Windows are 0.2 s; a window is closed two windows after
it began to end (grace 2), reports are kept 20 windows. The law is the one of test_adaptive_law.py:
ceiling 10 MB/s, floor 100 kB/s, target 100 ms.
"""

from __future__ import annotations

import json
import math

import pytest

from kqp.quotas.pools.adaptive_fleet import (
    AdaptiveRequest,
    AdaptiveStore,
    BudgetExchange,
    BudgetView,
    FleetBudget,
    Proposal,
    Report,
    decode_report,
    encode_report,
)
from kqp.quotas.pools.adaptive_law import AdaptiveBudget, Reason
from kqp.quotas.pools.upstream_signals import LatencyHistogram, WindowSignals

W, GRACE, KEEP = 0.2, 2, 20
CEILING, FLOOR, TARGET = 10_000_000.0, 100_000.0, 0.1
NAME = "ingest:producer_byte_rate"


def law() -> AdaptiveBudget:
    return AdaptiveBudget(CEILING, FLOOR, TARGET, 0.0)


def report(latency_ms: float, delivered: float, demand: float = math.inf, samples: int = 5, **signals: float) -> Report:
    h = LatencyHistogram()
    for _ in range(samples):
        h.record(latency_ms / 1000)
    return Report(WindowSignals(W, {1: h} if samples else {}, delivered * W, **signals), demand)  # type: ignore[arg-type]


class Fleet:
    """N replicas and a store; `window(w, reports)` ends window w everywhere, then every replica
    exchanges twice (two sync intervals per window), in order."""

    def __init__(self, n: int) -> None:
        self.store = AdaptiveStore()
        self.replicas = [FleetBudget(NAME, law(), W, grace_windows=GRACE, keep_windows=KEEP) for _ in range(n)]
        self.down = False

    def exchange(self, i: int, now: float) -> None:
        replica = self.replicas[i]
        request = AdaptiveRequest(f"p{i}", 200, GRACE, KEEP, (replica.collect(),))
        if self.down:
            replica.failed()
            return
        reply = self.store.exchange(request, now)
        replica.merge(reply.budgets[0], now, len(self.replicas))

    def window(self, w: int, reports: list[Report]) -> None:
        end = (w + 1) * W
        for replica, r in zip(self.replicas, reports, strict=True):
            replica.close_window(w, r)
        for step in (0.05, 0.15):
            for i in range(len(self.replicas)):
                self.exchange(i, end + step + i * 0.01)

    def budgets(self) -> list[float]:
        return [r.budget for r in self.replicas]


def reference(windows: list[list[Report]], upto: int) -> AdaptiveBudget:
    """One law run on the fleet's merged windows 0..upto: what the fleet must agree on."""
    one = law()
    for w, reports in enumerate(windows[:upto + 1]):
        fleet = WindowSignals.merged(r.signals for r in reports)
        one.update((w + 1) * W, fleet, sum(r.demand for r in reports))
    return one


def test_every_process_holds_the_budget_one_law_computes_from_the_fleets_windows() -> None:
    fleet = Fleet(3)
    # 6 healthy windows (each process delivering 150k), then 4 slow ones, then healthy again
    windows = ([[report(20, 150_000)] * 3] * 6 + [[report(300, 150_000)] * 3] * 4 + [[report(20, 150_000)] * 3] * 6)
    for w, reports in enumerate(windows):
        fleet.window(w, reports)
        # Window w is closed at (w + GRACE) windows: by then every replica has folded w - GRACE + 1.
        applied = w - GRACE + 1
        if applied >= 0:
            expected = reference(windows, applied).budget
            assert fleet.budgets() == pytest.approx([expected] * 3), f"window {w}"


def test_the_cut_is_anchored_on_the_fleets_delivered_rate_not_one_process_share() -> None:
    fleet = Fleet(3)
    for w in range(8):
        fleet.window(w, [report(20, 200_000)] * 3)
    before = fleet.budgets()[0]
    assert before == pytest.approx(1_200_000)   # slow start: 100k .. 800k, then 2 x D = 2 x 600k
    for w in range(8, 8 + GRACE + 1):
        fleet.window(w, [report(300, 200_000)] * 3)
    # D is the fleet's 3 x 200k = 600k: B = 600k * (1 + 100/shown(300)) / 2, about 400k. Each process
    # on its own would have anchored on 200k and cut to about 133k, three times too far.
    shown = LatencyHistogram({int(math.log2(300) * 4): 1}).quantile(0.5)
    assert shown is not None
    assert fleet.budgets() == pytest.approx([600_000 * (1 + 0.1 / shown) / 2] * 3)


def test_the_fleets_median_is_over_all_samples() -> None:
    # One process sees 300 ms, two see 20 ms: 10 of the fleet's 15 samples are fast, so its median
    # is 20 ms and nobody cuts; the slow process alone would have.
    fleet = Fleet(3)
    for w in range(8):
        fleet.window(w, [report(300, 100_000), report(20, 100_000), report(20, 100_000)])
    assert all(r.law.reason != Reason.LATENCY for r in fleet.replicas)
    assert fleet.replicas[0].law.latency == pytest.approx(LatencyHistogram({17: 1}).quantile(0.5))


def test_the_first_proposal_wins_and_the_other_adopts_it() -> None:
    fleet = Fleet(2)
    for w in range(6):
        fleet.window(w, [report(20, 300_000)] * 2)
    a, b = fleet.replicas
    store = fleet.store

    def exchange(name: str, replica: FleetBudget, now: float) -> None:
        reply = store.exchange(AdaptiveRequest(name, 200, GRACE, KEEP, (replica.collect(),)), now)
        replica.merge(reply.budgets[0], now, 2)

    # Window 6 goes slow; both report it at 1.45 s, and at 1.65 s (current window 8, grace 2) both
    # see it closed, fold it into the state at 5 and propose 5 -> 6.
    a.close_window(6, report(300, 300_000))
    b.close_window(6, report(300, 300_000))
    exchange("p0", a, 1.45)
    exchange("p1", b, 1.46)
    a.close_window(7, report(20, 300_000))
    b.close_window(7, report(20, 300_000))
    exchange("p0", a, 1.65)
    exchange("p1", b, 1.66)
    first, second = a.collect().proposal, b.collect().proposal
    assert first is not None and second is not None
    assert (first.after, first.applied) == (second.after, second.applied) == (5, 6)
    exchange("p0", a, 1.67)   # a's goes first and is taken
    reply = store.exchange(AdaptiveRequest("p1", 200, GRACE, KEEP, (b.collect(),)), 1.68)
    assert (reply.budgets[0].applied, reply.budgets[0].state) == (6, first.state)   # b's was refused
    b.merge(reply.budgets[0], 1.68, 2)
    assert b.budget == a.budget
    assert json.loads(first.state)["budget"] == a.budget
    # Whatever a late proposal from 5 says, the store is at 6 now: refused.
    late = BudgetExchange(NAME, (), Proposal(5, 7, '{"budget": 1}'))
    assert store.exchange(AdaptiveRequest("p1", 200, GRACE, KEEP, (late,)), 1.7).budgets[0].state == first.state


def test_a_new_fleet_is_seeded_by_its_first_process() -> None:
    store = AdaptiveStore()
    a = FleetBudget(NAME, law(), W, grace_windows=GRACE, keep_windows=KEEP)
    b = FleetBudget(NAME, law(), W, grace_windows=GRACE, keep_windows=KEEP)
    for replica in (a, b):   # before any exchange, each runs the law on its own window
        replica.close_window(0, report(20, 100_000))
        assert replica.budget == 200_000
    for name, replica, now in (("a", a, 0.25), ("b", b, 0.26)):
        replica.merge(store.exchange(AdaptiveRequest(name, 200, GRACE, KEEP, (replica.collect(),)), now).budgets[0],
                      now, 2)
    seed = a.collect().proposal
    assert seed is not None and (seed.after, seed.applied) == (-1, 0)   # no state yet: a proposes its own
    a.merge(store.exchange(AdaptiveRequest("a", 200, GRACE, KEEP, (a.collect(),)), 0.3).budgets[0], 0.3, 2)
    b.merge(store.exchange(AdaptiveRequest("b", 200, GRACE, KEEP, (b.collect(),)), 0.31).budgets[0], 0.31, 2)
    assert a.budget == b.budget == 200_000
    assert a.applied == b.applied == 0


def test_a_process_that_joins_adopts_the_fleets_budget() -> None:
    fleet = Fleet(2)
    for w in range(10):
        fleet.window(w, [report(20, 300_000)] * 2)
    newcomer = FleetBudget(NAME, law(), W, grace_windows=GRACE, keep_windows=KEEP)
    assert newcomer.budget == FLOOR
    reply = fleet.store.exchange(AdaptiveRequest("new", 200, GRACE, KEEP, (newcomer.collect(),)), 10 * W + 0.1)
    newcomer.merge(reply.budgets[0], 10 * W + 0.1, 3)
    assert newcomer.budget == fleet.budgets()[0] > FLOOR


def test_alone_a_process_reads_its_windows_as_the_fleets_by_symmetry() -> None:
    fleet = Fleet(3)
    for w in range(8):
        fleet.window(w, [report(20, 200_000)] * 3)
    fleet.down = True
    for w in range(8, 11):
        fleet.window(w, [report(300, 200_000)] * 3)
    # Each alone: D = 3 x its own 200k = 600k (the last exchange counted 3), as the fleet's would be,
    # so B = 600k * (1 + τ/L) / 2; on its own 200k it would be three times lower.
    for replica in fleet.replicas:
        assert not replica.shared
        latency = replica.law.latency
        assert latency is not None
        assert replica.budget == pytest.approx(600_000 * (1 + 0.1 / latency) / 2)


def test_after_a_long_outage_the_first_back_keeps_what_it_learnt_alone() -> None:
    fleet = Fleet(2)
    for w in range(8):
        fleet.window(w, [report(300, 150_000)] * 2)   # the fleet's state: cut well down
    before = fleet.budgets()[0]
    fleet.down = True
    for w in range(8, 8 + KEEP + 5):   # healthy again, alone, longer than the store keeps reports
        fleet.window(w, [report(20, 400_000)] * 2)
    alone = fleet.budgets()
    assert alone[0] > 2 * before
    fleet.down = False
    fleet.window(8 + KEEP + 5, [report(20, 400_000)] * 2)
    # The stale state (from before the outage) was not restored over what they learnt alone, and
    # they agree again.
    assert fleet.budgets()[0] == fleet.budgets()[1] >= alone[0]


def test_windows_run_alone_are_not_folded_twice() -> None:
    replica = FleetBudget(NAME, law(), W, grace_windows=GRACE, keep_windows=KEEP)
    texts = {}
    for w, r in enumerate([report(300, 400_000)] + [report(20, 400_000)] * 3):
        texts[w] = encode_report(r)
        replica.close_window(w, r)   # never exchanged yet: alone
    assert replica.law.reason == Reason.PROBE   # each window folded grows B by 11.9% (cut once: probing)
    alone = replica.budget
    # The store has no state and closed windows 2 and 3 (this process's own reports): they are in
    # the law already, so they are skipped, and the law's state is proposed as the fleet's from 3.
    view = BudgetView(-1, None, {2: (texts[2],), 3: (texts[3],)})
    replica.merge(view, 5 * W + 0.05, 1)
    assert replica.budget == alone
    proposal = replica.collect().proposal
    assert proposal is not None and (proposal.after, proposal.applied) == (-1, 3)


def test_a_store_that_lost_everything_is_seeded_again() -> None:
    fleet = Fleet(2)
    for w in range(8):
        fleet.window(w, [report(20, 300_000)] * 2)
    agreed = fleet.budgets()[0]
    fleet.store.forget()
    for w in range(8, 8 + GRACE + 2):
        fleet.window(w, [report(20, 300_000)] * 2)
    assert fleet.budgets()[0] == fleet.budgets()[1] >= agreed * 0.99
    view = fleet.store.exchange(AdaptiveRequest("p0", 200, GRACE, KEEP, ()), (8 + GRACE + 2) * W)
    assert view.budgets == ()


def test_reports_survive_the_store_as_text() -> None:
    original = report(37, 123_456.5, demand=math.inf, throttled=2, timeouts=1, disconnects=3, stalled=0.25)
    back = decode_report(encode_report(original), W)
    assert back == Report(WindowSignals(W, original.signals.latency, original.signals.delivered, 2, 1, 3, 0.25),
                          math.inf)
    assert back.signals.latency[1] == original.signals.latency[1]
