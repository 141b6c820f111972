"""The pool allocator (quotas/pools/allocation.py): weighted max-min over demand, with min/max shares.

Worked examples first, with the arithmetic in comments, on the issue's pool (B = 300 kB/s, job-a-
weight 3, job-b- and job-c- weight 1); then the invariants of weighted max-min, checked with
hypothesis over arbitrary members.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kqp.quotas.pools.allocation import INFINITE, Claim, allocate, fair_shares

B = 300_000.0
INF = INFINITE


def approx(values: list[float]) -> object:
    return pytest.approx(values, rel=1e-9, abs=1e-6)


def test_two_jobs_flat_out_split_by_weight() -> None:
    # L * 3 + L * 1 = 300k -> L = 75k: job-a- 225k, job-b- 75k (3:1)
    assert allocate(B, [Claim(3), Claim(1)]) == approx([225_000, 75_000])


def test_three_jobs_flat_out() -> None:
    # 3L + L + L = 300k -> L = 60k
    assert allocate(B, [Claim(3), Claim(1), Claim(1)]) == approx([180_000, 60_000, 60_000])


def test_a_member_alone_gets_the_whole_budget() -> None:
    assert allocate(B, [Claim(1)]) == approx([B])
    # Alone and asking for less: nobody else wants the slack, so it is the member's too.
    assert allocate(B, [Claim(1, demand=1000)]) == approx([B])


def test_under_use_gets_all_it_offers_and_the_rest_goes_to_the_others() -> None:
    # job-b- offers 50k < its 75k share: it gets 50k, job-a- the other 250k (not just 225k)
    assert allocate(B, [Claim(3), Claim(1, demand=50_000)]) == approx([250_000, 50_000])
    # Two under-users and one flat out: 300k - 20k - 30k = 250k for job-a-
    assert allocate(B, [Claim(3), Claim(1, 20_000), Claim(1, 30_000)]) == approx([250_000, 20_000, 30_000])


def test_the_rest_is_split_by_weight_among_the_unsatisfied() -> None:
    # c offers 10k; a (w3) and b (w1) share 290k: 4L = 290k -> a 217.5k, b 72.5k
    assert allocate(B, [Claim(3), Claim(1), Claim(1, 10_000)]) == approx([217_500, 72_500, 10_000])


def test_all_idle_hands_out_the_slack_by_weight() -> None:
    # Nobody demands anything: work-conserving, the budget still goes out, 3:1.
    assert allocate(B, [Claim(3, 0), Claim(1, 0)]) == approx([225_000, 75_000])
    # Slack goes above the demands by water-filling: a at 100k already, b at 0; 3L + L = 300k gives
    # L = 75k, and a's 225k >= 100k: the level is what counts, not demand + a slice of the slack.
    assert allocate(B, [Claim(3, 100_000), Claim(1, 0)]) == approx([225_000, 75_000])
    # a at 280k: a stays at its demand (3L < 280k), b takes the last 20k
    assert allocate(B, [Claim(3, 280_000), Claim(1, 0)]) == approx([280_000, 20_000])


def test_no_members() -> None:
    assert allocate(B, []) == []
    assert fair_shares(B, []) == []


def test_min_share_lifts_a_light_member_that_wants_it() -> None:
    # b (w1) has min_share 0.4 -> floor 120k > its weighted 75k: b 120k, a the other 180k
    assert allocate(B, [Claim(3), Claim(1, min_share=0.4)]) == approx([180_000, 120_000])


def test_min_share_is_a_guarantee_not_a_gift() -> None:
    # b wants only 10k: its floor is min(120k, 10k) = 10k, a takes the other 290k
    assert allocate(B, [Claim(3), Claim(1, 10_000, min_share=0.4)]) == approx([290_000, 10_000])


def test_min_shares_over_one_are_scaled_down_alike() -> None:
    # floors 0.8 B = 240k and 0.6 B = 180k: 420k > 300k, so each gets floor * 300/420
    got = allocate(B, [Claim(1, min_share=0.8), Claim(1, min_share=0.6)])
    assert got == approx([240_000 * 300 / 420, 180_000 * 300 / 420])   # 171.4k, 128.6k


def test_max_share_caps_and_what_it_leaves_goes_to_the_others() -> None:
    # a (w3) capped at 0.5 B = 150k; b takes the other 150k although its weighted share is 75k
    assert allocate(B, [Claim(3, max_share=0.5), Claim(1)]) == approx([150_000, 150_000])


def test_max_shares_under_one_leave_part_of_the_budget_unallocated() -> None:
    # 0.5 B + 0.3 B = 240k: a cap is a cap, 60k stays unallocated even with both flat out
    assert allocate(B, [Claim(1, max_share=0.5), Claim(1, max_share=0.3)]) == approx([150_000, 90_000])


def test_fair_shares_ignore_demand() -> None:
    assert fair_shares(B, [Claim(3, 0), Claim(1, 5)]) == approx([225_000, 75_000])


@pytest.mark.parametrize("bad", [
    {"weight": 0}, {"weight": -1}, {"weight": math.inf}, {"demand": -1}, {"demand": math.nan},
    {"min_share": 0.6, "max_share": 0.5}, {"max_share": 1.5}, {"min_share": -0.1},
])
def test_bad_claims_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Claim(**bad)


def test_bad_budget_is_refused() -> None:
    for budget in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            allocate(budget, [Claim()])


# -- invariants ------------------------------------------------------------------------------------

weights = st.floats(0.01, 100)
demands = st.one_of(st.just(INF), st.floats(0, 2 * B), st.just(0.0))


@st.composite
def claims(draw: st.DrawFn, bounded: bool = True) -> list[Claim]:
    out = []
    for _ in range(draw(st.integers(1, 8))):
        low = draw(st.floats(0, 0.5)) if bounded and draw(st.booleans()) else 0.0
        high = draw(st.floats(low, 1.0)) if bounded and draw(st.booleans()) else 1.0
        out.append(Claim(draw(weights), draw(demands), low, high))
    return out


budgets = st.floats(0, 1e9)
EPS = 1e-6


def tol(budget: float) -> float:
    return EPS * max(1.0, budget)


def parts(budget: float, cs: list[Claim]) -> tuple[list[float], list[float], list[float]]:
    caps = [min(c.demand, c.max_share * budget) for c in cs]
    floors = [min(c.min_share * budget, cap) for c, cap in zip(cs, caps, strict=True)]
    tops = [c.max_share * budget for c in cs]
    return floors, caps, tops


@given(budgets, claims())
def test_never_more_than_the_budget_and_within_the_caps(budget: float, cs: list[Claim]) -> None:
    got = allocate(budget, cs)
    assert sum(got) <= budget + tol(budget)
    for a, c in zip(got, cs, strict=True):
        assert -tol(budget) <= a <= c.max_share * budget + tol(budget)


@given(budgets, claims())
def test_work_conserving(budget: float, cs: list[Claim]) -> None:
    # Unless the guarantees are overbooked, the whole budget goes out, up to what max_shares allow.
    floors, _, tops = parts(budget, cs)
    assume(sum(floors) <= budget)
    assert sum(allocate(budget, cs)) == pytest.approx(min(budget, sum(tops)), rel=1e-9, abs=tol(budget))


@given(budgets, claims())
def test_no_member_gets_more_than_its_demand_unless_nobody_wants_the_slack(budget: float, cs: list[Claim]) -> None:
    floors, caps, _ = parts(budget, cs)
    assume(sum(floors) <= budget)
    got = allocate(budget, cs)
    if sum(caps) >= budget:            # contention: nobody above its demand (or its cap)
        assert all(a <= cap + tol(budget) for a, cap in zip(got, caps, strict=True))
    else:                              # every demand met, and the slack handed out on top
        assert all(a >= cap - tol(budget) for a, cap in zip(got, caps, strict=True))


@given(budgets, claims())
def test_weighted_max_min(budget: float, cs: list[Claim]) -> None:
    # The defining property: a member short of what it wants (below its demand and cap) has at
    # least the allocation per weight of any member above its floor. Otherwise moving a little
    # from that one to it would raise the smaller of the two normalized allocations.
    floors, caps, _ = parts(budget, cs)
    assume(sum(floors) <= budget)
    got = allocate(budget, cs)
    for i, (a, c) in enumerate(zip(got, cs, strict=True)):
        assert a >= floors[i] - tol(budget)
        if a >= caps[i] - tol(budget):
            continue
        for j, (b, d) in enumerate(zip(got, cs, strict=True)):
            if b > floors[j] + tol(budget):
                assert a / c.weight >= b / d.weight - tol(budget) / min(c.weight, d.weight)


@given(budgets, claims())
def test_an_unsatisfied_member_gets_at_least_its_fair_share(budget: float, cs: list[Claim]) -> None:
    # So a member's fair share (fair_shares: every demand unbounded) is what it can count on.
    assume(sum(c.min_share for c in cs) <= 1)
    _, caps, _ = parts(budget, cs)
    for a, g, cap in zip(allocate(budget, cs), fair_shares(budget, cs), caps, strict=True):
        if a < cap - tol(budget):
            assert a >= g - tol(budget)


@given(budgets, st.floats(1, 10), claims())
def test_more_budget_takes_from_nobody(budget: float, factor: float, cs: list[Claim]) -> None:
    before, after = allocate(budget, cs), allocate(budget * factor, cs)
    assert all(b >= a - tol(budget * factor) for a, b in zip(before, after, strict=True))


@given(budgets, st.floats(0.01, 100), claims())
def test_only_the_ratio_of_weights_counts(budget: float, scale: float, cs: list[Claim]) -> None:
    scaled = [Claim(c.weight * scale, c.demand, c.min_share, c.max_share) for c in cs]
    assert allocate(budget, scaled) == pytest.approx(allocate(budget, cs), rel=1e-6, abs=tol(budget))


@given(budgets, st.integers(2, 6), weights, demands)
def test_equal_claims_get_equal_allocations(budget: float, n: int, weight: float, demand: float) -> None:
    got = allocate(budget, [Claim(weight, demand)] * n)
    assert max(got) - min(got) <= tol(budget)


# -- service classes (Claim.rank, class_shares) ----------------------------------------------------
# The run: B = 400 kB/s, a stream (class 0) offering 100 kB/s, four batch jobs (class 1) flat out.
C = 400_000.0


def test_a_higher_class_is_served_first_and_what_it_leaves_goes_below() -> None:
    stream, batch = Claim(demand=100_000, rank=0), Claim(rank=1)
    # the stream's 100k first; the batch jobs split the other 300k evenly: 75k each
    assert allocate(C, [stream, batch, batch, batch, batch]) == approx([100_000] + [75_000] * 4)
    # without classes the stream is one of five: 400k / 5 = 80k < its 100k
    assert allocate(C, [Claim(demand=100_000), *[Claim()] * 4]) == approx([80_000] * 5)


def test_a_higher_class_flat_out_takes_everything() -> None:
    # strict priority: the batch jobs get nothing while the class above wants the whole budget
    assert allocate(C, [Claim(rank=0), Claim(rank=1)]) == approx([C, 0])
    # and a class above that wants nothing leaves everything below (work-conserving)
    assert allocate(C, [Claim(demand=0, rank=0), Claim(rank=1)]) == approx([0, C])


def test_max_share_caps_a_class_and_the_rest_goes_below() -> None:
    # class 0 at most 0.5 B = 200k, flat out: two members split it 100k/100k; class 1 the other 200k
    assert allocate(C, [Claim(rank=0), Claim(rank=0), Claim(rank=1)], [0.5]) == approx([100_000, 100_000, 200_000])
    # the cap also holds for the slack: nobody below, 200k stays unallocated
    assert allocate(C, [Claim(demand=0, rank=0)], [0.5]) == approx([200_000])


def test_weighted_max_min_within_a_class() -> None:
    # class 1's 300k split 3:1 by weight: 4L = 300k, L = 75k
    got = allocate(C, [Claim(demand=100_000, rank=0), Claim(3, rank=1), Claim(1, rank=1)])
    assert got == approx([100_000, 225_000, 75_000])


def test_the_slack_goes_to_every_member_by_weight_whatever_its_class() -> None:
    # every demand met (50k + 30k): the 320k left goes out by weight up to max_share, as in one class:
    # a class below left at 0 could not grow without being throttled first
    assert allocate(C, [Claim(demand=50_000, rank=0), Claim(demand=30_000, rank=1)]) == approx([200_000, 200_000])
    # class 0's member capped at max_share 0.25 (100k): the rest of the slack falls to class 1
    assert allocate(C, [Claim(demand=50_000, max_share=0.25, rank=0), Claim(demand=30_000, rank=1)]) \
        == approx([100_000, 300_000])
    # and a class's own max_share holds for the slack too: class 0 at most 0.1 B
    assert allocate(C, [Claim(demand=10_000, rank=0), Claim(demand=30_000, rank=1)], [0.1]) \
        == approx([40_000, 360_000])


def test_floors_below_come_before_a_higher_class() -> None:
    # A min_share is a guarantee whatever the class: batch member with min_share 0.1 keeps 40k even
    # though the class above wants everything; the class above gets the other 360k.
    assert allocate(C, [Claim(rank=0), Claim(min_share=0.1, rank=1), Claim(rank=1)]) == approx([360_000, 40_000, 0])


def test_a_cut_budget_comes_out_of_the_lowest_class_first() -> None:
    # The adaptive law cuts B. Two batch members have min_share 0.1 (floors 0.1 B each, set aside first).
    claims_ = [Claim(demand=100_000, rank=0), Claim(min_share=0.1, rank=1), Claim(min_share=0.1, rank=1)]
    # 200k: floors 2 x 20k, the stream's 100k, the batch class the other 60k above its floors: 50k each
    assert allocate(200_000, claims_) == approx([100_000, 50_000, 50_000])
    # 140k: floors 2 x 14k, the stream 100k, 12k left: 20k each; the stream not cut yet
    assert allocate(140_000, claims_) == approx([100_000, 20_000, 20_000])
    # 125k: the batch class is down to its floors (12.5k each) and the stream still has its 100k ...
    assert allocate(125_000, claims_) == approx([100_000, 12_500, 12_500])
    # ... 120k: only now the stream is cut: 120k - 2 x 12k floors = 96k
    assert allocate(120_000, claims_) == approx([96_000, 12_000, 12_000])


def test_fair_shares_with_classes() -> None:
    # everyone unbounded: class 0 takes its cap (0.5 B), class 1 the rest
    assert fair_shares(C, [Claim(demand=1, rank=0), Claim(demand=1, rank=1)], [0.5]) == approx([200_000, 200_000])
    assert fair_shares(C, [Claim(demand=1, rank=0), Claim(demand=1, rank=1)]) == approx([C, 0])


ranked = st.lists(st.tuples(weights, demands, st.integers(0, 2)), min_size=1, max_size=8)
class_caps = st.lists(st.floats(0.05, 1.0), max_size=3)


@given(budgets, ranked, class_caps)
def test_classes_never_more_than_the_budget_nor_a_class_above_its_share(
        budget: float, members: list[tuple[float, float, int]], caps: list[float]) -> None:
    cs = [Claim(w, d, rank=r) for w, d, r in members]
    got = allocate(budget, cs, caps)
    assert sum(got) <= budget + tol(budget)
    for rank, cap in enumerate(caps):
        assert sum(a for a, c in zip(got, cs, strict=True) if c.rank == rank) <= cap * budget + tol(budget)


@given(budgets, ranked, class_caps)
def test_a_lower_class_gets_anything_only_once_every_class_above_is_satisfied(
        budget: float, members: list[tuple[float, float, int]], caps: list[float]) -> None:
    # Strict priority: if a class below holds more than its demand-capped floors (none here), every
    # class above is at its cap or has every member at its demand.
    cs = [Claim(w, d, rank=r) for w, d, r in members]
    got = allocate(budget, cs, caps)
    for low in range(3):
        if sum(a for a, c in zip(got, cs, strict=True) if c.rank == low) <= tol(budget):
            continue
        for high in range(low):
            mine = [(a, c) for a, c in zip(got, cs, strict=True) if c.rank == high]
            total = sum(a for a, _ in mine)
            cap = caps[high] * budget if high < len(caps) else budget
            assert total >= cap - tol(budget) or all(a >= min(c.demand, budget) - tol(budget) for a, c in mine)


@given(budgets, ranked)
def test_within_a_class_it_is_weighted_max_min(budget: float, members: list[tuple[float, float, int]]) -> None:
    # Each class alone gets what allocate gives its members for the part of the budget it took.
    cs = [Claim(w, d, rank=r) for w, d, r in members]
    got = allocate(budget, cs)
    for rank in range(3):
        mine = [i for i, c in enumerate(cs) if c.rank == rank]
        if not mine:
            continue
        part = sum(got[i] for i in mine)
        alone = allocate(part, [Claim(cs[i].weight, cs[i].demand) for i in mine])
        if part < budget - tol(budget) or rank == max(c.rank for c in cs):
            assert [got[i] for i in mine] == pytest.approx(alone, rel=1e-6, abs=tol(budget))
