"""Weighted max-min fair division of a pool's budget among its members: pure arithmetic, no state.

A member has a weight w, a demand d (``inf`` while a throttle held it back), optional bounds
`min_share` and `max_share` (fractions of the budget B), and a class rank (0 the highest). Floors
``min(min_share_i * B, cap_i)`` are set aside first (scaled down alike if they exceed B: a floor is
a guarantee, never a gift), with ``cap_i = min(d_i, max_share_i * B)``. Then each class in rank
order water-fills what is left up to its members' caps and its own `max_share` of B: the level L
at which ``clamp(L * w_i, floor_i, cap_i)`` sums to what the class takes. Slack no demand takes is
handed out to every member by weight up to `max_share`, each class within its own (work-conserving).
One class is plain weighted max-min; weights of 0 are refused.

`fair_shares` is the allocation every member would get if all demanded without limit: the share a
member keeps as its quota while it uses less (pools/ledger.py); `cut_from_bottom` takes an amount
back, lowest class first. Sorting the breakpoints makes both O(n log n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

INFINITE = math.inf


@dataclass(frozen=True, slots=True)
class Claim:
    """One member's say in a division: weight, demand (units/s, ``inf`` for unbounded), bounds and
    its class's rank (0 is served first)."""

    weight: float = 1.0
    demand: float = INFINITE
    min_share: float = 0.0
    max_share: float = 1.0
    rank: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"a weight must be a finite number > 0, got {self.weight}")
        if not self.demand >= 0:   # also refuses NaN
            raise ValueError(f"a demand must be >= 0, got {self.demand}")
        if not 0 <= self.min_share <= self.max_share <= 1:
            raise ValueError(f"need 0 <= min_share <= max_share <= 1, got {self.min_share}, {self.max_share}")
        if self.rank < 0:
            raise ValueError(f"a class rank must be >= 0, got {self.rank}")


def water_fill(budget: float, weights: Sequence[float], floors: Sequence[float],
               caps: Sequence[float]) -> list[float]:
    """``clamp(L * w_i, floor_i, cap_i)`` with the level L at which they sum to `budget`.

    Needs sum(floors) <= budget <= sum(caps) and floor_i <= cap_i. The sum is piecewise linear and
    non-decreasing in L, with a kink where a member leaves its floor (L = floor/w) or reaches its
    cap (L = cap/w): walk the kinks in order, keeping the sum's constant part and slope.
    """
    kinks: list[tuple[float, int, int]] = []   # (level, 0 = leaves its floor | 1 = reaches its cap, member)
    for i, w in enumerate(weights):
        kinks.append((floors[i] / w, 0, i))
        if caps[i] != INFINITE:
            kinks.append((caps[i] / w, 1, i))
    kinks.sort()
    fixed = math.fsum(floors)   # members on their floor or cap contribute a constant...
    slope = 0.0                 # ...the others L * w_i
    level = 0.0
    for at, kind, i in kinks:
        if fixed + slope * at >= budget:
            break
        level = at
        if kind == 0:
            fixed -= floors[i]
            slope += weights[i]
        else:
            fixed += caps[i]
            slope -= weights[i]
    else:
        at = INFINITE
    if slope > 0:
        level = min(at, max(level, (budget - fixed) / slope))
    return [min(max(level * w, floors[i]), caps[i]) for i, w in enumerate(weights)]


def allocate(budget: float, claims: Sequence[Claim], class_shares: Sequence[float] = ()) -> list[float]:
    """Each claim's allocation of `budget`, in order: classes by rank, weighted max-min within one,
    work-conserving. `class_shares[r]`: the most class r takes, as a fraction of the budget (absent: 1)."""
    if not (math.isfinite(budget) and budget >= 0):
        raise ValueError(f"a budget must be a finite number >= 0, got {budget}")
    if not claims:
        return []
    weights = [c.weight for c in claims]
    tops = [c.max_share * budget for c in claims]
    caps = [min(c.demand, top) for c, top in zip(claims, tops, strict=True)]
    floors = [min(c.min_share * budget, cap) for c, cap in zip(claims, caps, strict=True)]
    wanted = math.fsum(floors)
    if wanted > budget:
        # Overbooked guarantees: each floor scaled down alike.
        return [f * budget / wanted for f in floors]
    out = list(floors)
    left = budget - wanted
    ranks: dict[int, list[int]] = {}
    for i, c in enumerate(claims):
        ranks.setdefault(c.rank, []).append(i)
    limits = {rank: class_shares[rank] * budget if rank < len(class_shares) else budget for rank in ranks}
    # First every class's demand, highest first ...
    for rank, members in sorted(ranks.items()):
        if left <= 0:
            break
        held = math.fsum(out[i] for i in members)
        extra = min(left, min(math.fsum(caps[i] for i in members), max(held, limits[rank])) - held)
        if extra > 0:
            _fill(out, members, held + extra, weights, caps)
            left -= extra
    # ... then the slack, every demand being met: to every member by weight up to max_share, whatever its
    # class (a class above holds its fair share as its quota already; a class below, left at 0, could
    # not grow without being throttled first), each class within its own max_share.
    open_ranks = dict(ranks)
    while left > 0 and open_ranks:
        members = [i for group in open_ranks.values() for i in group]
        room = math.fsum(tops[i] - out[i] for i in members)
        if room <= 0:
            break
        trial = list(out)
        _fill(trial, members, math.fsum(out[i] for i in members) + min(left, room), weights, tops)
        over = [rank for rank, group in open_ranks.items()
                if math.fsum(trial[i] for i in group) > max(limits[rank], math.fsum(out[i] for i in group))]
        if not over:
            out = trial
            break
        for rank in over:   # a class at its max_share: filled to it alone, and out of the shared fill
            group = open_ranks.pop(rank)
            held = math.fsum(out[i] for i in group)
            extra = min(left, max(0.0, limits[rank] - held))
            if extra > 0:
                _fill(out, group, held + extra, weights, tops)
                left -= extra
    return out


def _fill(out: list[float], members: list[int], total: float, weights: Sequence[float],
          bounds: Sequence[float]) -> None:
    """Water-fill `members` of `out` up to `total` between what they hold and `bounds`, by weight."""
    filled = water_fill(total, [weights[i] for i in members], [out[i] for i in members],
                        [bounds[i] for i in members])
    for i, a in zip(members, filled, strict=True):
        out[i] = a


def fair_shares(budget: float, claims: Sequence[Claim], class_shares: Sequence[float] = ()) -> list[float]:
    """What each claim would get if every member demanded without limit: its guaranteed share."""
    return allocate(budget, [Claim(c.weight, INFINITE, c.min_share, c.max_share, c.rank) for c in claims],
                    class_shares)


def cut_from_bottom(values: Sequence[float], claims: Sequence[Claim], amount: float, above: int = 0) -> list[float]:
    """`values` (allocations of `claims`) less up to `amount`, taken from the lowest class first, each
    member of a class giving up the same fraction of what it has; a class is touched only once every
    class below it has nothing left, and classes of rank `above` or higher never."""
    out = list(values)
    left = amount
    for rank in sorted({c.rank for c in claims}, reverse=True):
        if left <= 0 or rank <= above:
            break
        members = [i for i, c in enumerate(claims) if c.rank == rank]
        held = math.fsum(out[i] for i in members)
        if held <= 0:
            continue
        cut = min(held, left)
        for i in members:
            out[i] *= (held - cut) / held
        left -= cut
    return out
