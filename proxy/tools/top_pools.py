"""`kqp top`'s pool view: one block per pool (budget and usage), one line per member.

Read from the `kqp_pool_*` series (pool_metrics.py), kept apart from top.py's entity table because
a pool is a different thing to look at: one budget and how it is divided now, not one quota per
row. A member's line shows the figures kqp divides with: its usage, the allocation it is held to,
its fair share, what it borrows above that share, and its demand (`held` while a pool throttle holds
it back). A member using less than its share keeps the share as its allocation and lends the rest:
the pool's `lent`. A pool with classes adds a CLASS column, members in class order, and a line
per class (allocation, demand, what it moved, pre-emptions). Pure functions of the parsed samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

POOL_FAMILIES = ("kqp_pool_budget", "kqp_pool_budget_configured", "kqp_pool_usage", "kqp_pool_lent",
                 "kqp_pool_observed")
MEMBER_FAMILIES = {"kqp_pool_member_allocation": "allocation", "kqp_pool_member_fair_share": "fair",
                   "kqp_pool_member_usage": "usage", "kqp_pool_member_borrowed": "borrowed",
                   "kqp_pool_member_demand": "demand"}
CLASS_FAMILIES = {"kqp_pool_class_allocation": "allocation", "kqp_pool_class_demand": "demand",
                  "kqp_pool_class_delivered": "delivered", "kqp_pool_class_preemptions_total": "preemptions"}


@dataclass
class PoolMember:
    name: str                         # the client id, a prefix group's prefix and `*`, or a user's name
    user: str
    values: dict[str, float] = field(default_factory=dict)
    service_class: str = ""


@dataclass
class PoolView:
    name: str
    quota: str
    values: dict[str, float] = field(default_factory=dict)
    members: dict[tuple[str, str], PoolMember] = field(default_factory=dict)
    classes: dict[str, dict[str, float]] = field(default_factory=dict)   # in the order the series came


def member_name(labels: dict[str, str]) -> str:
    if labels.get("client_id_prefix"):
        return f"{labels['client_id_prefix']}*"
    return labels.get("client_id") or "(all clients)"


def add_sample(pools: dict[tuple[str, str], PoolView], name: str, labels: dict[str, str], value: float) -> bool:
    """Take one sample if it is a pool series; whether it was."""
    if name not in POOL_FAMILIES and name not in MEMBER_FAMILIES and name not in CLASS_FAMILIES \
            and name != "kqp_pool_member_class":
        return False
    key = (labels.get("pool", ""), labels.get("quota", ""))
    pool = pools.get(key)
    if pool is None:
        pool = pools[key] = PoolView(*key)
    if name in POOL_FAMILIES:
        pool.values[name] = value
        return True
    if name in CLASS_FAMILIES:
        pool.classes.setdefault(labels.get("class", ""), {})[CLASS_FAMILIES[name]] = value
        return True
    who = (labels.get("user", ""), member_name(labels))
    member = pool.members.get(who)
    if member is None:
        member = pool.members[who] = PoolMember(who[1], who[0])
    if name == "kqp_pool_member_class":
        member.service_class = labels.get("class", "")
    else:
        member.values[MEMBER_FAMILIES[name]] = value
    return True


def pool_lines(pools: dict[tuple[str, str], PoolView], fmt: Callable[[float, str], str],
               units: dict[str, str]) -> list[str]:
    """The pool section's lines: a header per pool, its members by allocation, largest first. `fmt`
    writes a number short (top.human); `units` maps a quota type to its unit."""
    if not pools:
        return []
    lines = ["", "POOLS"]
    for (name, quota), pool in sorted(pools.items()):
        unit = units.get(quota, "/s")
        budget = pool.values.get("kqp_pool_budget", 0.0)
        configured = pool.values.get("kqp_pool_budget_configured", budget)
        usage = pool.values.get("kqp_pool_usage", 0.0)
        used = f"{usage / budget * 100:.0f}%" if budget else "-"
        adaptive = f" (configured {fmt(configured, unit)})" if configured != budget else ""
        observed = "  [observe]" if pool.values.get("kqp_pool_observed") else ""
        lines.append(f"{name}{observed}  {quota}  budget {fmt(budget, unit)}{unit}{adaptive}  "
                     f"usage {fmt(usage, unit)}{unit} ({used})  lent {fmt(pool.values.get('kqp_pool_lent', 0.0), unit)}"
                     f"  members {len(pool.members)}")
        order = {name: rank for rank, name in enumerate(pool.classes)}
        for class_name, v in pool.classes.items():
            demand = v.get("demand", 0.0)
            lines.append(f"  class {class_name}: allocation {fmt(v.get('allocation', 0.0), unit)}{unit}  demand "
                         f"{'held' if math.isinf(demand) else fmt(demand, unit) + unit}  delivered "
                         f"{fmt(v.get('delivered', 0.0), unit)}{unit}  pre-emptions {v.get('preemptions', 0.0):.0f}")
        rows = [["  MEMBER", "USER", *(["CLASS"] if order else []), "USAGE", "ALLOCATION", "FAIR SHARE", "BORROWED",
                 "DEMAND"]]
        for m in sorted(pool.members.values(), key=lambda m: (order.get(m.service_class, len(order)),
                                                               -m.values.get("allocation", 0.0), m.name)):
            v = m.values
            demand = v.get("demand", 0.0)
            figures = [fmt(v.get(k, 0.0), unit) for k in ("usage", "allocation", "fair", "borrowed")]
            rows.append([f"  {m.name}", m.user or "-", *([m.service_class or "-"] if order else []), *figures,
                         "held" if math.isinf(demand) else fmt(demand, unit)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines
