"""The quota gauges of /metrics: limits and measured rates read from the quota manager at scrape time.

Split from metrics.py, which counts events on the forwarding path: these series describe state,
and are built only when /metrics is read, for the principals the observer holds (so they expire
with them, and `max_entities` bounds them as it bounds the counters).

A client-id prefix group is one quota shared by many principals. Its rate and limit have series of
their own (`kqp_quota_group_*`), and `kqp_quota_group_member` names the principals charged to it,
per quota type: each member's `kqp_quota_usage` is the group's shared rate, so a reader (or
`kqp top`) that wants a member's own usage takes it from that member's counters
(`kqp_bytes_total`, `kqp_records_total`, ...), and adds nothing up from the shared gauges.
`kqp_quota_observed` marks the quotas in mode observe.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import Principal

ENTITY = ("user", "client_id")
GROUP = ("quota", "user", "client_id_prefix")


def quota_families(quotas: QuotaManager, principals: Iterable[Principal], now: float) -> Iterator[Metric]:
    """Limits and rates of every quota in force for `principals`, and of the prefix groups."""
    limit = GaugeMetricFamily("kqp_quota_limit", "The quota in force for the entity, in the quota's unit",
                              labels=("quota", *ENTITY))
    usage = GaugeMetricFamily("kqp_quota_usage", "The rate the quota is measured against now, in the "
                              "quota's unit (shared quotas show the shared sensor's rate)",
                              labels=("quota", *ENTITY))
    # A prefix group's sensor also gets series of its own, labelled by its prefix: the group is
    # one quota, which the per-principal series above only show member by member.
    group_limit = GaugeMetricFamily("kqp_quota_group_limit", "The quota of a client-id prefix group "
                                    "(client_id_prefix entity), shared by all its client ids", labels=GROUP)
    group_usage = GaugeMetricFamily("kqp_quota_group_usage", "The rate a client-id prefix group's "
                                    "shared quota is measured against now", labels=GROUP)
    member = GaugeMetricFamily("kqp_quota_group_member", "1 for each principal (member_user, "
                               "member_client_id) whose quota of this type is the prefix group's",
                               labels=(*GROUP, "member_user", "member_client_id"))
    observed = GaugeMetricFamily("kqp_quota_observed", "1 for each quota in force in mode observe: measured, "
                                 "its throttles counted and never acted on", labels=("quota", *ENTITY))
    if quotas.enabled:
        states = quotas.snapshot(now)
        rates = {(s.quota_type, s.key): s.rate for s in states}
        for s in states:
            if s.key.client_id_prefix is not None:
                labels = (s.quota_type, s.key.user, s.key.client_id_prefix)
                group_limit.add_metric(labels, s.limit)
                group_usage.add_metric(labels, s.rate)
        for p in principals:
            for quota_type, (key, value) in quotas.limits(p).items():
                labels = (quota_type, p.user, p.client_id)
                limit.add_metric(labels, value)
                usage.add_metric(labels, rates.get((quota_type, key), 0.0))
                if quotas.observed(p, quota_type):
                    observed.add_metric(labels, 1.0)
                if key.client_id_prefix is not None:
                    member.add_metric((quota_type, key.user, key.client_id_prefix, p.user, p.client_id), 1.0)
    yield from (limit, usage, group_limit, group_usage, member, observed)
