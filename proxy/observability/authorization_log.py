"""Authorization denials: counted, logged as Kafka's authorizer logs them, and kept for `kqp explain`.

`AuthorizationLog.denied` is the authorization policy's denial sink (on the loop's thread: plain
numbers, no lock). Each denial is counted in `kqp_authorization_denials_total{user, operation,
resource_type}` (past `max_series` label sets, new ones count under user `other`), logged on
`kqp.authorizer` in the words of Kafka's `kafka.authorizer.logger` (`Principal = User:bob is Denied
operation = WRITE from host = ... on resource = Topic:LITERAL:b for request = Produce based on rule
...`) at most once a minute per principal, operation and resource (a client retrying would flood the
log; the count says how many were left out), and kept among the last denials of its user, which
`kqp explain --user` shows with the rule that decided. Nothing of a request but its resource names
is kept: no token, password or record data reaches a denial.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from kqp.protocol.apis import API_NAMES
from kqp.proxy.policies.authorization.checks import Denial
from kqp.quotas.acls.authorizer import Authorizer

__all__ = ["AuthorizationLog"]


def _shown(member: object) -> str:   # Topic, TransactionalId: as Kafka's log writes a resource type
    return "".join(part.capitalize() for part in str(getattr(member, "name", member)).split("_"))

log = logging.getLogger("kqp.authorizer")

LOG_EVERY_SECONDS = 60.0
RECENT_PER_USER = 20
MAX_LOGGED = 10_000   # (principal, operation, resource) keys remembered for the log's rate limit
OTHER = "other"


class AuthorizationLog:
    def __init__(self, clock: Callable[[], float], max_series: int = 10_000) -> None:
        self._clock = clock
        self.max_series = max_series
        self.counts: dict[tuple[str, str, str], int] = {}
        self._logged: dict[tuple[str, int, int, str], list[float]] = {}   # key -> [last logged, left out since]
        self._recent: dict[str, deque[dict[str, Any]]] = {}

    def denied(self, denial: Denial) -> None:
        now = self._clock()
        user = denial.principal.partition(":")[2]
        labels = (user, denial.operation.name, denial.resource_type.name)
        if labels not in self.counts and len(self.counts) >= self.max_series:
            labels = (OTHER, *labels[1:])
        self.counts[labels] = self.counts.get(labels, 0) + 1
        api = API_NAMES.get(denial.api, str(denial.api))
        record = {"at": now, "api": api, "operation": denial.operation.name,
                  "resource_type": denial.resource_type.name, "resource_name": denial.name, "host": denial.host,
                  "rule": denial.decision.rule, "why": str(denial.decision)}
        recent = self._recent.get(user)
        if recent is None:
            if len(self._recent) >= self.max_series:
                self._recent.clear()
            recent = self._recent[user] = deque(maxlen=RECENT_PER_USER)
        recent.append(record)
        self._log(denial, api, now)

    def _log(self, denial: Denial, api: str, now: float) -> None:
        key = (denial.principal, denial.operation, denial.resource_type, denial.name)
        seen = self._logged.get(key)
        if seen is not None and now - seen[0] < LOG_EVERY_SECONDS:
            seen[1] += 1
            return
        if seen is None and len(self._logged) >= MAX_LOGGED:
            self._logged.clear()
        left_out = 0 if seen is None else int(seen[1])
        self._logged[key] = [now, 0]
        binding = denial.decision.binding
        rule = f"MatchingAcl({binding})" if binding is not None else denial.decision.rule
        log.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s for "
                 "request = %s based on rule %s%s", denial.principal, denial.operation.name, denial.host,
                 _shown(denial.resource_type), denial.name, api, rule,
                 f" ({left_out} more like it in the last minute)" if left_out else "",
                 extra={"principal": denial.principal, "operation": denial.operation.name,
                        "resource_type": denial.resource_type.name, "resource_name": denial.name, "api": api})

    def recent(self, user: str) -> list[dict[str, Any]]:
        """The user's last denials, newest first, each `ago_seconds` old."""
        now = self._clock()
        return [{**{k: v for k, v in r.items() if k != "at"}, "ago_seconds": round(now - r["at"], 3)}
                for r in reversed(self._recent.get(user, ()))]

    def explain(self, user: str, authorizer: Authorizer) -> dict[str, Any]:
        """`kqp explain`'s authorization section for `user`: may it anything, which ACLs name it (or
        everyone), and its last refusals with the rule that decided each."""
        principal = f"User:{user}"
        return {"principal": principal, "super_user": principal in authorizer.super_users,
                "allow_everyone_if_no_acl_found": authorizer.allow_if_none,
                "acls": [str(b) for b in authorizer.bindings if b.principal in (principal, "User:*")],
                "denials": self.recent(user)}

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("kqp_authorization_denials", "Requests (or resources in them) kqp's "
                                     "authorization refused, per user, operation and resource type",
                                     labels=("user", "operation", "resource_type"))
        for labels, n in sorted(self.counts.items()):
            family.add_metric(labels, n)
        yield family
