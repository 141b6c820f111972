"""Prometheus series for fleet quotas: is this process sharing its quotas, with how many, at what cost.

A collector of its own, registered on the observer's registry next to the per-entity series when
quotas are shared (cluster scope, or `--workers`); it reads one `FleetStatus` snapshot per scrape,
which the runtime's exchange driver builds, so nothing here touches the exchange itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


@dataclass(frozen=True)
class FleetStatus:
    """The exchange as a scrape sees it."""

    backend: str                     # "redis" or "workers"
    target: str                      # the Redis URL without its password, or the workers' parent
    up: bool                         # the last exchange succeeded: quotas are shared
    instances: int                   # instances the last successful exchange counted (0: none yet)
    share: float                     # fraction of each quota this process enforces on its own usage
    syncs: int
    errors: int
    last_duration_seconds: float | None
    since_success_seconds: float | None
    sensors: int                     # sensors in the last exchange
    last_error: str | None


class FleetCollector:
    def __init__(self, status: Callable[[], FleetStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        s = self._status()
        labels = ("backend",)
        value = (s.backend,)

        def gauge(name: str, doc: str, number: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=labels)
            family.add_metric(value, number)
            return family

        yield gauge("kqp_fleet_sync_up", "1 while the last usage exchange with the fleet succeeded (quotas "
                    "shared); 0 while this process enforces its share alone", 1.0 if s.up else 0.0)
        yield gauge("kqp_fleet_instances", "kqp processes the last successful exchange counted", s.instances)
        yield gauge("kqp_fleet_quota_share", "Fraction of each quota this process holds its own usage to: 1 "
                    "while shared (the fleet's usage counts), 1/n while alone", s.share)
        yield gauge("kqp_fleet_shared_sensors", "Quota sensors in the last exchange", s.sensors)
        syncs = CounterMetricFamily("kqp_fleet_syncs", "Usage exchanges attempted", labels=labels)
        syncs.add_metric(value, s.syncs)
        yield syncs
        errors = CounterMetricFamily("kqp_fleet_sync_errors", "Usage exchanges that failed or timed out",
                                     labels=labels)
        errors.add_metric(value, s.errors)
        yield errors
        if s.last_duration_seconds is not None:
            yield gauge("kqp_fleet_sync_duration_seconds", "Round trip of the last successful exchange",
                        s.last_duration_seconds)
        if s.since_success_seconds is not None:
            yield gauge("kqp_fleet_sync_age_seconds", "Seconds since the last successful exchange",
                        s.since_success_seconds)
