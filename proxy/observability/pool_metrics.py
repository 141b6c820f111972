"""Prometheus series for capacity pools: each pool's budget and usage, each member's division.

Read from the quota manager's `Pools.snapshot` at scrape time, on the loop's thread, like the
per-entity quota gauges (metrics.py calls `pool_families`). A member is labelled by its quota key,
as Kafka's quota metrics are tagged: `user`, `client_id` (empty when the member is a user or a
prefix group) and `client_id_prefix` (empty unless it is a prefix group). Members are listed while
they take part in the division; one silent for a span drops out, and its series with it, so label
sets expire with the members (and the members with `metrics.entity_expiry_seconds`, as sensors).
A pool with classes has one series per class (`class` label) and `kqp_pool_member_class` naming
each member's.

`budget_changes` is `kqp explain`'s view of the same pools: an adaptive pool's recent changes of
budget, each as a JSON-ready record, from `Pools.adaptive_changes`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kqp.quotas.manager import QuotaManager
from kqp.quotas.pools.pool_set import PoolState

POOL = ("pool", "quota")
MEMBER = (*POOL, "user", "client_id", "client_id_prefix")
CLASS = (*POOL, "class")


def pool_families(states: list[PoolState]) -> Iterator[Metric]:
    def gauge(name: str, doc: str, labels: tuple[str, ...]) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=labels)

    budget = gauge("kqp_pool_budget", "The budget the pool divides now, in the quota's unit (an adaptive pool's "
                   "may be below its configured one)", POOL)
    ceiling = gauge("kqp_pool_budget_configured", "The pool's budget as configured", POOL)
    usage = gauge("kqp_pool_usage", "The rate its members use together, measured as their quotas are (the "
                  "fleet's in cluster scope)", POOL)
    lent = gauge("kqp_pool_lent", "What members using less than their fair share lend the others now", POOL)
    members = gauge("kqp_pool_members", "Members taking part in the division", POOL)
    observed = gauge("kqp_pool_observed", "1 for a pool in mode observe: it divides and charges, and its "
                     "throttles are counted, never acted on", POOL)
    allocation = gauge("kqp_pool_member_allocation", "The quota the member is held to in the pool: its "
                       "max-min allocation, or its fair share if that is more", MEMBER)
    fair = gauge("kqp_pool_member_fair_share", "What the member gets if every member wants without limit "
                 "(weighted, within min_share and max_share)", MEMBER)
    used = gauge("kqp_pool_member_usage", "The member's rate, as its pool quota measures it", MEMBER)
    borrowed = gauge("kqp_pool_member_borrowed", "Allocation above the member's fair share: other members' "
                     "unused shares", MEMBER)
    demand = gauge("kqp_pool_member_demand", "What the member offered in the last windows (+Inf while a pool "
                   "throttle holds it back)", MEMBER)
    # Adaptive pools: the law's view beside the budget it sets (kqp_pool_budget).
    latency = gauge("kqp_pool_adaptive_latency_seconds", "The upstream latency the adaptive law read in its last "
                    "window: the median of the pool's answers, its slowest broker's (NaN: no answer counted)", POOL)
    target = gauge("kqp_pool_adaptive_target_seconds", "The adaptive pool's target_latency_ms, in seconds", POOL)
    floor = gauge("kqp_pool_adaptive_floor", "The lowest budget the adaptive law sets", POOL)
    delivered = gauge("kqp_pool_adaptive_delivered", "What the upstream delivered for the pool lately (the larger "
                      "of the last two windows), in the quota's unit per second", POOL)
    changes = CounterMetricFamily("kqp_pool_adaptive_changes", "Changes of an adaptive pool's budget of 1% or "
                                  "more, by reason (kqp explain lists them)", labels=(*POOL, "reason"))
    # Service classes: each class's members summed, and which class each member is in.
    class_allocation = gauge("kqp_pool_class_allocation", "The class's allocation: its members' max-min "
                             "allocations, served before the classes below it", CLASS)
    class_demand = gauge("kqp_pool_class_demand", "What the class's members offered in the last windows (+Inf "
                         "while a pool throttle holds one back)", CLASS)
    class_delivered = gauge("kqp_pool_class_delivered", "What the class's members moved: their rates over the "
                            "span, as their pool quotas measure them", CLASS)
    class_members = gauge("kqp_pool_class_members", "The class's members taking part in the division", CLASS)
    preemptions = CounterMetricFamily("kqp_pool_class_preemptions", "Divisions that cut the class at once because "
                                      "a member of a higher class started offering", labels=CLASS)
    member_class = gauge("kqp_pool_member_class", "1 for the class the member is in (pools with classes)",
                         (*MEMBER, "class"))
    for state in states:
        labels = (state.name, str(state.quota_type))
        view = state.adaptive
        if view is not None:
            law = view.state
            latency.add_metric(labels, math.nan if law.latency is None else law.latency)
            target.add_metric(labels, law.target)
            floor.add_metric(labels, law.floor)
            delivered.add_metric(labels, law.delivered)
            for reason, count in sorted(view.changes.items()):
                changes.add_metric((*labels, reason), count)
        budget.add_metric(labels, state.budget)
        ceiling.add_metric(labels, state.ceiling)
        usage.add_metric(labels, state.usage)
        lent.add_metric(labels, state.lent)
        members.add_metric(labels, len(state.members))
        if state.observed:
            observed.add_metric(labels, 1.0)
        for m in state.members:
            who = (*labels, m.key.user, m.key.client_id, m.key.client_id_prefix or "")
            allocation.add_metric(who, m.allocation)
            fair.add_metric(who, m.fair_share)
            used.add_metric(who, m.usage)
            borrowed.add_metric(who, m.borrowed)
            demand.add_metric(who, m.demand)
            if m.service_class is not None:
                member_class.add_metric((*who, m.service_class), 1)
        for c in state.classes:
            mine = (*labels, c.name)
            class_allocation.add_metric(mine, c.allocation)
            class_demand.add_metric(mine, c.demand)
            class_delivered.add_metric(mine, c.delivered)
            class_members.add_metric(mine, c.members)
            preemptions.add_metric(mine, c.preemptions)
    yield from (budget, ceiling, usage, lent, members, observed, allocation, fair, used, borrowed, demand, latency,
                target, floor, delivered, changes, class_allocation, class_demand, class_delivered, class_members,
                preemptions, member_class)


def budget_changes(quotas: QuotaManager, clock: Callable[[], float]) -> Callable[[str], list[dict[str, Any]]]:
    """A provider of a pool's recent changes of budget (an empty list for a pool that is not adaptive),
    oldest first: when (loop time, and seconds ago), the quota type, the budget before and after, why,
    the latency the law read and its target, and the line `kqp explain` prints."""
    def changes(pool: str) -> list[dict[str, Any]]:
        now = clock()
        return [{"at": c.at, "ago_seconds": now - c.at, "quota": str(quota_type), "old": c.old, "budget": c.new,
                 "reason": str(c.reason), "latency_seconds": c.latency, "target_seconds": c.target,
                 "text": c.describe()}
                for quota_type, c in quotas.pools.adaptive_changes(now).get(pool, [])]
    return changes
