"""`kqp explain`'s answer: why one client id (and user) is throttled, as JSON ("why is my job slow?").

Served at `GET /explain?client_id=X[&user=U]` (http_endpoint.py), printed by `kqp explain`. One
document, assembled on the loop's thread from what kqp already keeps: the precedence `ladder`
(`kqp.quotas.entities.ladder`, the walk resolution makes); each quota in force with its limit,
entity, sensor, rate (and the fleet's, in shared scope), its mode, and the other principals seen
that share its sensor (a prefix group's members, a user's clients); the `throttles` of the last 5
minutes by cause, and the `observed` ones that quotas in mode observe would have given; open `connections`
(software, whether it honours throttles, how long still muted: `kqp.proxy.connection.views`); its
`requests` by API and the `group_protocols` they belong to (a share group's member, KIP-932);
`pools` (with the member's class and each class's division), `budget_changes` from a provider
plugged in at assembly (null while none is); `authorization`, when kqp authorizes: the user's ACLs
and last refusals, each with its rule. With no user given, the user is the one the client id's open
connections authenticated as (the first, if several), else ANONYMOUS; `user_from` says which.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

from kqp.protocol.apis import API_NAMES, GROUP_PROTOCOLS
from kqp.proxy.connection.views import ConnectionView
from kqp.proxy.observability.client_metrics import BUCKET_SECONDS, RECENT_BUCKETS, RecentThrottles
from kqp.quotas.entities import ladder
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import ANONYMOUS, Principal, QuotaKey, QuotaType
from kqp.quotas.pools.ledger import key_pattern
from kqp.quotas.pools.membership import membership

__all__ = ["BudgetChanges", "Explainer"]

BudgetChanges = Callable[[str], list[dict[str, Any]]]   # pool name -> its recent budget changes
Requests = Callable[[Principal], dict[str, int]]        # a principal -> its requests by API name
_PROTOCOL_OF = {API_NAMES[api]: protocol for api, protocol in GROUP_PROTOCOLS.items()}
SPAN = BUCKET_SECONDS * RECENT_BUCKETS
MAX_NAMED = 20   # sharing principals named one by one; the rest are counted


def _key(key: QuotaKey) -> dict[str, str | None]:
    return {"user": key.user, "client_id": key.client_id, "client_id_prefix": key.client_id_prefix}


def _shared_by(key: QuotaKey) -> str | None:
    """Who shares a sensor keyed `key` (entities.sharing's words), None for one principal's own."""
    if key.client_id_prefix is not None:
        return "client-id-prefix"
    if key.client_id == "":
        return "user"
    return "client-id" if key.user == "" else None


class Explainer:
    def __init__(self, quotas: QuotaManager, connections: Callable[[], Iterable[ConnectionView]],
                 clock: Callable[[], float], recent: RecentThrottles | None = None,
                 budget_changes: BudgetChanges | None = None, recent_observed: RecentThrottles | None = None,
                 principals: Callable[[], Iterable[Principal]] | None = None,
                 requests: Requests | None = None,
                 authorization: Callable[[str], dict[str, Any]] | None = None) -> None:
        self.quotas, self.connections, self.clock = quotas, connections, clock
        self.recent, self.recent_observed = recent, recent_observed
        self.budget_changes = budget_changes
        self.authorization = authorization   # user -> what kqp's authorization says of it (None: off)
        self.principals = principals   # those seen lately (the metrics' entities), for who shares a sensor
        self.requests = requests

    def __call__(self, client_id: str, user: str | None = None) -> dict[str, Any]:
        now = self.clock()
        mine = [v for v in self.connections() if client_id in v.client_ids and (user is None or v.user == user)]
        user_from = "given"
        if user is None:
            users = sorted({v.user for v in mine})
            user, user_from = (users[0], "connection") if users else (ANONYMOUS, "default")
            mine = [v for v in mine if v.user == user]
        principal = Principal(user, client_id)
        rungs = ladder(self.quotas.settings, principal)
        requests = {} if self.requests is None else self.requests(principal)
        return {
            "client_id": client_id, "user": user, "user_from": user_from,
            "scope": "instance" if self.quotas.fleet is None else "shared",
            "pacing": self.quotas.settings.pacing,
            "ladder": [r._asdict() for r in rungs],
            "quotas": self._quotas(principal, {t: r for r in rungs for t in r.matched}, now),
            "throttles": self._throttles(self.recent, principal, now),
            "observed": self._throttles(self.recent_observed, principal, now),
            "connections": [asdict(v) for v in mine],
            "requests": requests,
            "group_protocols": sorted({_PROTOCOL_OF[api] for api in requests if api in _PROTOCOL_OF}),
            "pools": self._pools(principal, now),
            "authorization": None if self.authorization is None else self.authorization(user),
        }

    def _quotas(self, principal: Principal, matched: dict[str, Any], now: float) -> list[dict[str, Any]]:
        out = []
        seen = [p for p in self.principals() if p != principal] if self.principals is not None else []
        for quota_type, (key, limit) in sorted(self.quotas.limits(principal).items()):
            sensor = self.quotas.sensor(QuotaType(quota_type), key)
            rung = matched.get(str(quota_type))
            entry: dict[str, Any] = {
                "quota_type": str(quota_type), "limit": limit, "sensor": _key(key),
                "entity": rung.path if rung else None, "level": rung.level if rung else None,
                "rate": 0.0 if sensor is None else sensor.local_rate(now),
                "last_throttle_seconds": 0.0 if sensor is None else sensor.last_throttle,
                "mode": "observe" if self.quotas.observed(principal, QuotaType(quota_type)) else "enforce",
            }
            others: list[Principal] = []
            if (by := _shared_by(key)) is not None:
                others = sorted((p for p in seen if self.quotas.limits(p).get(quota_type, (None,))[0] == key),
                                key=lambda p: (p.user, p.client_id))
            if by is not None and (others or by == "client-id-prefix"):   # a group is named even alone
                entry["shared"] = {"by": by, "others": [{"user": p.user, "client_id": p.client_id}
                                                        for p in others[:MAX_NAMED]],
                                   "more": max(0, len(others) - MAX_NAMED)}
            if self.quotas.fleet is not None:
                entry["fleet_rate"] = 0.0 if sensor is None else sensor.measure(now)
            if sensor is not None and (tokens := sensor.tokens(now)) is not None:
                entry["tokens"] = tokens
            out.append(entry)
        return out

    @staticmethod
    def _throttles(recent: RecentThrottles | None, principal: Principal, now: float) -> dict[str, Any]:
        causes = {} if recent is None else recent.summary(principal, now, SPAN)
        return {
            "span_seconds": SPAN,
            "count": sum(int(c["count"]) for c in causes.values()),
            "total_seconds": sum(c["total_seconds"] for c in causes.values()),
            "largest_seconds": max((c["largest_seconds"] for c in causes.values()), default=0.0),
            "by_cause": causes,
        }

    def _pools(self, principal: Principal, now: float) -> list[dict[str, Any]]:
        pools = self.quotas.pools
        states = {(s.name, str(s.quota_type)): s for s in pools.snapshot(now)}
        out = []
        for spec in pools.settings.pools:
            if not spec.selects(principal.user, principal.client_id):
                continue
            for quota_type in spec.budgets:
                state = states.get((spec.name, str(quota_type)))
                key = membership(pools.settings, quota_type, principal).key
                member = None if state is None else next((m for m in state.members if m.key == key), None)
                classes = {}
                if spec.classes:
                    rank = spec.rank(*key_pattern(key))
                    classes = {"class": spec.classes[rank].name, "classes": [] if state is None else [
                        {"name": c.name, "rank": c.rank, "max_share": c.max_share, "burst_seconds": c.burst_seconds,
                         "members": c.members, "allocation": c.allocation,
                         "demand": None if math.isinf(c.demand) else c.demand, "held": math.isinf(c.demand),
                         "delivered": c.delivered, "preemptions": c.preemptions} for c in state.classes]}
                out.append({
                    "pool": spec.name, "quota_type": str(quota_type), "topics": list(spec.topics),
                    "budget": None if state is None else state.budget,
                    "configured_budget": spec.budgets[quota_type],
                    "usage": None if state is None else state.usage,
                    "member": {"key": _key(key), "active": member is not None,
                               **({} if member is None else {
                                   "weight": member.weight, "usage": member.usage,
                                   "demand": None if math.isinf(member.demand) else member.demand,
                                   "held": math.isinf(member.demand),   # a pool throttle holds it back
                                   "allocation": member.allocation, "fair_share": member.fair_share,
                                   "borrowed": member.borrowed, "credit": member.credit})},
                    **classes,
                    "budget_changes": None if self.budget_changes is None else self.budget_changes(spec.name),
                })
        return out
