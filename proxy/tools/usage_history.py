"""What kqp's metrics in Prometheus say of a past period, in figures that add up.

`kqp recommend` and `kqp report` start here. `Period.ask` checks that the server scraped kqp in the
period (else one line: unreachable, not scraping kqp, or nothing in the range) and how often. Every
figure comes from per-principal counters (`kqp_bytes_total`, `kqp_requests_total`, ...), which sum
honestly; never from `kqp_quota_usage`, which shows a shared quota's rate on each of its members. A
principal's figures go to the quota entity it is measured as (`Entities.key`): the sensor its
config resolves it to (`--config`), else the prefix group kqp reported it in
(`kqp_quota_group_member`), else itself, so a group is summed from its members once each.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kqp.quotas.entities import resolutions
from kqp.quotas.model import ANONYMOUS, Principal, QuotaKey, QuotaSettings

from .prometheus_api import Prometheus, PrometheusError, format_duration

__all__ = ["Entities", "Period", "entity_entry", "per_principal", "principal_of"]

# How far back kqp's series are looked for when none is in the period: to tell "not scraping kqp" apart.
LOOK_BACK_SECONDS = 30 * 86400.0
DEFAULT_SCRAPE_SECONDS = 15.0
# The labels of kqp's per-principal counters besides user and client_id (deploy/prometheus/README.md).
COUNTER_LABELS = {"kqp_bytes_total": ("direction",), "kqp_requests_total": ("api",),
                  "kqp_throttle_seconds_total": ("quota",), "kqp_observed_muted_seconds_total": ("quota",),
                  "kqp_topic_bytes_total": ("direction", "topic")}


@dataclass(frozen=True)
class Period:
    """The last `since` seconds up to `end`, on one Prometheus, with the scrape interval seen in it."""

    prometheus: Prometheus
    since: float
    since_text: str
    end: float
    scrape_seconds: float

    @property
    def start(self) -> float:
        return self.end - self.since

    @property
    def range(self) -> str:
        return format_duration(self.since)

    @classmethod
    def ask(cls, prometheus: Prometheus, since: float, since_text: str, end: float | None = None) -> Period:
        """The period, once Prometheus shows it scraped kqp in it; PrometheusError otherwise."""
        end = time.time() if end is None else end
        window = format_duration(since)
        if not prometheus.query(f"max_over_time(kqp_entities[{window}])", end):
            earlier = prometheus.series("kqp_entities", end - LOOK_BACK_SECONDS, end)
            if not earlier:
                raise PrometheusError(f"Prometheus at {prometheus.url} has no kqp series (kqp_entities): it does not "
                                      "scrape kqp; add kqp's metrics endpoint (metrics.listen) to its scrape targets "
                                      "(README, Rolling out quotas)")
            raise PrometheusError(f"no kqp samples in the last {since_text} on {prometheus.url} (kqp was scraped "
                                  "before that): choose a longer --since, or check that Prometheus still scrapes kqp")
        return cls(prometheus, since, since_text, end, _scrape_seconds(prometheus, since, end))

    def vector(self, expr: str) -> list[dict[str, Any]]:
        return self.prometheus.query(expr, self.end)

    def matrix(self, expr: str, step: float) -> list[dict[str, Any]]:
        return self.prometheus.query_range(expr, self.start, self.end, step)


def _scrape_seconds(prometheus: Prometheus, since: float, end: float) -> float:
    """The median spacing of kqp_entities' samples over the last minutes of the period."""
    found = prometheus.query(f"kqp_entities[{format_duration(min(since, 600.0))}]", end)
    gaps = [float(b[0]) - float(a[0]) for series in found for a, b in zip(series["values"], series["values"][1:],
                                                                              strict=False)]
    return statistics.median(gaps) if gaps else DEFAULT_SCRAPE_SECONDS


def per_principal(function: str, counter: str, window: str, by: tuple[str, ...] = ()) -> str:
    """PromQL: `function` (rate, increase) of a kqp counter (a selector of one) per principal and `by`,
    summed over every kqp scraped, each counted once even where two scrape jobs read it (one `instance`)."""
    labels = ", ".join(dict.fromkeys(("user", "client_id", *by, *COUNTER_LABELS.get(counter.split("{")[0], ()))))
    return (f"sum by (user, client_id{''.join(', ' + b for b in by)}) "
            f"(max by ({labels}, instance) ({function}({counter}[{window}])))")


def principal_of(labels: Mapping[str, str]) -> Principal:
    return Principal(labels.get("user", ""), labels.get("client_id", ""))


@dataclass
class Entities:
    """Which quota entity each principal's figures of a quota type go to (module docstring)."""

    settings: QuotaSettings | None = None
    # (quota type, member user, member client id) -> the prefix group's key, as kqp reported it
    groups: dict[tuple[str, str, str], QuotaKey] = field(default_factory=dict)

    @classmethod
    def ask(cls, period: Period, settings: QuotaSettings | None = None) -> Entities:
        found = period.vector("max by (quota, user, client_id_prefix, member_user, member_client_id) "
                              f"(max_over_time(kqp_quota_group_member[{period.range}]))")
        groups = {(m["metric"]["quota"], m["metric"]["member_user"], m["metric"]["member_client_id"]):
                  QuotaKey(m["metric"].get("user", ""), "", m["metric"]["client_id_prefix"]) for m in found}
        return cls(settings, groups)

    def key(self, principal: Principal, quota_type: str) -> QuotaKey:
        """The sensor `principal`'s use of `quota_type` is measured on."""
        if self.settings is not None:
            found = resolutions(self.settings, principal).get(quota_type)
            if found is not None:
                return found.key
        group = self.groups.get((quota_type, principal.user, principal.client_id))
        if group is not None:
            return group
        # Unconfigured: the principal alone; an unauthenticated one as its client id (/clients/c).
        if principal.user == ANONYMOUS and principal.client_id:
            return QuotaKey("", principal.client_id)
        return QuotaKey(principal.user, principal.client_id)

    def members(self, principals: Iterable[Principal], quota_type: str) -> dict[QuotaKey, list[Principal]]:
        out: dict[QuotaKey, list[Principal]] = {}
        for p in principals:
            out.setdefault(self.key(p, quota_type), []).append(p)
        return out


def entity_entry(key: QuotaKey) -> dict[str, str]:
    """The `quotas.entities` names of the entity measured on `key` (the key's own, exact entity)."""
    entry: dict[str, str] = {}
    if key.user:
        entry["user"] = key.user
    if key.client_id_prefix is not None:
        entry["client_id_prefix"] = key.client_id_prefix
    elif key.client_id:
        entry["client_id"] = key.client_id
    return entry
