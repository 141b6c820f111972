"""Which client libraries honour throttles, and each entity's recent throttles.

Kept beside the observer's per-entity counters (metrics.py), each bounded: `ClientStats` counts
throttles given to clients that do not back off, per client software
(`kqp_client_throttle_ignored_total{software,version,reason}`, KIP-511's names), the requests
dropped because their client gave up (`kqp_requests_dropped_total`), and, from the open connections
at scrape time, each software's connections and whether they honour throttles
(`kqp_client_connections`). `RecentThrottles` keeps each entity's throttles of the last minutes in
10 s buckets (count, total, largest, per cause) for `kqp explain`.

Software names come from clients: they are checked against KIP-511's pattern (else `invalid`), cut
to 64 characters, counted as `other` past `MAX_SOFTWARE` label sets, and dropped when idle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kqp.proxy.connection.views import ConnectionView
from kqp.quotas.model import Principal

__all__ = ["ClientHooks", "ClientStats", "RecentThrottles", "label"]

MAX_SOFTWARE = 256            # (software, version, reason) label sets kept
MAX_LABEL = 64
OTHER = "other"
BUCKET_SECONDS = 10.0         # recent throttles are kept per 10 s ...
RECENT_BUCKETS = 30           # ... over the last 5 minutes


def label(value: str) -> str:
    """A client software name or version as a label value: KIP-511 names are checked and cut where
    they are read (`kqp.protocol.api_versions.client_software`); this only bounds the length."""
    return value[:MAX_LABEL]


class ClientStats:
    """Throttles ignored per client software, requests dropped, and the connections by software."""

    def __init__(self, max_labels: int = MAX_SOFTWARE) -> None:
        self.max_labels = max_labels
        self.ignored: dict[tuple[str, str, str], list[float]] = {}   # labels -> [count, last seen]
        self.dropped = 0
        #: The open connections, set where the server is assembled (None: no gauge).
        self.connections: Callable[[], Iterable[ConnectionView]] | None = None

    def throttle_ignored(self, software: str, version: str, reason: str, now: float) -> None:
        key = (label(software), label(version), reason)
        found = self.ignored.get(key)
        if found is None:
            if len(self.ignored) >= self.max_labels:
                key = (OTHER, OTHER, reason)
            found = self.ignored.setdefault(key, [0, now])
        found[0] += 1
        found[1] = now

    def expire(self, now: float, idle_seconds: float) -> None:
        for key in [k for k, (_, seen) in self.ignored.items() if now - seen >= idle_seconds]:
            del self.ignored[key]

    def families(self) -> Iterator[Metric]:
        ignored = CounterMetricFamily("kqp_client_throttle_ignored", "Throttles given to clients that do not "
                                      "back off by themselves, by client software (KIP-511's name and version, "
                                      "or unknown and the request's API and version) and why: version (no "
                                      "client-side throttling at that request version, or acks=0) or observed "
                                      "(it sent while throttled)", labels=("software", "version", "reason"))
        for (software, version, reason), (n, _) in self.ignored.items():
            ignored.add_metric((software, version, reason), n)
        yield ignored
        yield CounterMetricFamily("kqp_requests_dropped", "Requests read from a client but not forwarded, dropped "
                                  "because the client closed or reset its connection first", value=self.dropped)
        if self.connections is None:
            return
        by: dict[tuple[str, str, str], int] = {}
        for view in self.connections():
            key = (label(view.software), label(view.software_version), view.honours_throttles)
            by[key] = by.get(key, 0) + 1
        gauge = GaugeMetricFamily("kqp_client_connections", "Open client connections by client software and "
                                  "whether they honour throttles (yes, no, or unknown: not throttled yet)",
                                  labels=("software", "version", "honours_throttles"))
        for key, n in sorted(by.items()):
            gauge.add_metric(key, n)
        yield gauge


@dataclass(slots=True)
class _Bucket:
    start: float
    causes: dict[str, list[float]] = field(default_factory=dict)   # quota -> [count, total s, largest s]


class RecentThrottles:
    """Per entity, the throttles of the last RECENT_BUCKETS x BUCKET_SECONDS, per cause."""

    def __init__(self, max_entities: int = 10_000) -> None:
        self.max_entities = max_entities   # as many as the observer keeps (metrics.max_entities)
        self._by: dict[Principal, deque[_Bucket]] = {}

    def add(self, principal: Principal, quota: str, seconds: float, now: float, counted: float | None = None) -> None:
        """A throttle of `seconds`; `counted`, what it adds to the total when not all of it (an
        observed one's would-be mute overlapping those before it)."""
        buckets = self._by.get(principal)
        if buckets is None:
            if len(self._by) >= self.max_entities:
                return
            buckets = self._by[principal] = deque(maxlen=RECENT_BUCKETS)
        start = now - now % BUCKET_SECONDS
        if not buckets or buckets[-1].start != start:
            buckets.append(_Bucket(start))
        found = buckets[-1].causes.setdefault(quota, [0, 0.0, 0.0])
        found[0] += 1
        found[1] += seconds if counted is None else counted
        found[2] = max(found[2], seconds)

    def summary(self, principal: Principal, now: float, span: float) -> dict[str, dict[str, float]]:
        """quota -> {count, total_seconds, largest_seconds} over the buckets of the last `span` s."""
        out: dict[str, dict[str, float]] = {}
        for bucket in self._by.get(principal, ()):
            if bucket.start + BUCKET_SECONDS <= now - span:
                continue
            for quota, (n, total, largest) in bucket.causes.items():
                got = out.setdefault(quota, {"count": 0, "total_seconds": 0.0, "largest_seconds": 0.0})
                got["count"] += n
                got["total_seconds"] += total
                got["largest_seconds"] = max(got["largest_seconds"], largest)
        return out

    def forget(self, principals: Iterable[Principal]) -> None:
        for p in principals:
            self._by.pop(p, None)


class ClientHooks:
    """The observer's hooks for client software and given-up requests (mixed into
    `PrometheusObserver`, which sets `clients` and its clock)."""

    clients: ClientStats

    def now(self) -> float:
        raise NotImplementedError

    def throttle_ignored(self, software: str, version: str, reason: str) -> None:
        self.clients.throttle_ignored(software, version, reason, self.now())

    def requests_dropped(self, count: int) -> None:
        self.clients.dropped += count
