"""Prometheus metrics for kqp: a `ProxyObserver` that counts traffic per quota entity.

Connections report events through the hooks of `hooks.py`. Hooks run on the forwarding path,
several per request, so they only add to plain numbers held per principal (a dict lookup and an
addition, no lock: everything runs on the loop's thread). The Prometheus view is built at scrape
time by one collector on the observer's own `CollectorRegistry` (never the global one, so tests and
several proxies in one process stay apart): counters and the upstream latency histogram from those
numbers, and gauges of state (muted connections, the delay queue, quota limits and rates from the
manager, upstream health) read then. `prepare_scrape` freezes it all on the loop's thread; the text
is rendered in a worker thread.

Cardinality is bounded as Kafka bounds its sensors: a principal that sends nothing for
`entity_expiry_seconds` loses its series, and past `max_entities` new principals count under
`user="other", client_id="other"` until expiry frees room.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import importlib.metadata
import platform
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from kqp.protocol.apis import API_NAMES
from kqp.proxy.connection.events import CLOSE_REASONS
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.observability.client_metrics import ClientHooks, ClientStats, RecentThrottles
from kqp.proxy.observability.pool_metrics import pool_families
from kqp.proxy.tools.hot_path import DISTRIBUTION, describe
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import QUOTA_TYPES, Principal, QuotaType

from .quota_metrics import ENTITY, quota_families

if TYPE_CHECKING:
    from kqp.config.model import MetricsConfig

OTHER = "other"  # the label values of the bucket for principals past `max_entities`
_OTHER_PRINCIPAL = Principal(OTHER, OTHER)
RELOAD_RESULTS = ("success", "failure")
UPSTREAM_ANOMALIES = ("unawaited", "unreadable")
# Upstream round trips run from sub-millisecond to a Fetch long poll (max_wait_ms, often 0.5 s).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class UpstreamHealth(NamedTuple):
    """What the server reports of its upstream at scrape time."""

    metadata_age_seconds: float | None   # since the upstream last answered Metadata; None: never
    fresh_seconds: float                 # the age past which the upstream counts as down


@dataclass(slots=True)
class _Entity:
    """One principal's running totals; a series exists once its number has been touched."""

    user: str
    client_id: str
    seen: float
    traffic: dict[str, list[float]] = field(default_factory=dict)   # direction -> [bytes, records]
    requests: dict[int, int] = field(default_factory=dict)          # api key -> count
    handler: float | None = None                                    # seconds
    throttle: dict[str, list[float]] = field(default_factory=dict)  # quota -> [seconds, responses]
    # mode observe, quota -> [seconds it would have been muted, requests, that mute's end, counted up to]
    observed: dict[str, list[float]] = field(default_factory=dict)
    topics: dict[tuple[str, str], int] = field(default_factory=dict)  # (direction, topic) -> records bytes
    muted: dict[str, float] = field(default_factory=dict)           # quota -> connection-seconds of ended mutes
    muted_shown: dict[str, float] = field(default_factory=dict)     # quota -> what the last scrape showed


class _Latency:
    """A fixed-bucket histogram as plain numbers (per-bucket counts; cumulated at scrape time)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, n in zip((*LATENCY_BUCKETS, float("inf")), self.counts, strict=True):
            running += n
            out.append((floatToGoString(bound), running))
        return out


class PrometheusObserver(ClientHooks, ProxyObserver):
    """The hooks of `ProxyObserver` as Prometheus series on `self.registry`."""

    wants_records = True  # kqp_records_total counts records even where no record quota needs them

    def __init__(self, *, entity_expiry_seconds: float = 3600.0, max_entities: int = 10_000,
                 clock: Callable[[], float] | None = None, registry: CollectorRegistry | None = None,
                 process_metrics: bool = True, topic_bytes: bool = False) -> None:
        if entity_expiry_seconds <= 0 or max_entities < 1:
            raise ValueError("entity_expiry_seconds must be > 0 and max_entities >= 1")
        self.entity_expiry_seconds = float(entity_expiry_seconds)
        self.max_entities = int(max_entities)
        self.wants_topics = topic_bytes
        self._topic_series = 0   # (entity, direction, topic) series held, bounded by max_entities
        self._clock = clock
        self._entities: dict[Principal, _Entity] = {}
        self._connections: dict[str, int] = {}
        self._closed = dict.fromkeys(CLOSE_REASONS, 0)
        self._reloads = dict.fromkeys(RELOAD_RESULTS, 0)
        self._anomalies = dict.fromkeys(UPSTREAM_ANOMALIES, 0)
        self._latency: dict[int, _Latency] = {}
        # (entity, quota) -> [connections muted now, when that number last changed]
        # (principal, quota) -> [mutes running, sum of their starts, sum of the ends of those ended since]
        self._muted: dict[tuple[Principal, str], list[float]] = {}
        self.clients, self.recent = ClientStats(), RecentThrottles(self.max_entities)   # client_metrics.py
        self.recent_observed = RecentThrottles(self.max_entities)   # what observed quotas would have throttled
        self.quotas: QuotaManager | None = None
        self.upstream: Callable[[], UpstreamHealth] | None = None
        self.readiness: Callable[[], tuple[bool, str]] | None = None
        self.registry = registry if registry is not None else CollectorRegistry()
        self._scrape = _ScrapeCollector(self)
        self.registry.register(self._scrape)
        if process_metrics:
            ProcessCollector(registry=self.registry)

    @classmethod
    def from_config(cls, config: MetricsConfig) -> PrometheusObserver:
        return cls(entity_expiry_seconds=config.entity_expiry_seconds, max_entities=config.max_entities,
                   topic_bytes=config.topic_bytes)

    @staticmethod
    def for_proxy(config: MetricsConfig) -> ProxyObserver:
        """What a proxy observes with: this observer when an endpoint will serve it, else the no-op base."""
        return PrometheusObserver.from_config(config) if config.listen is not None else ProxyObserver()

    def bind(self, clock: Callable[[], float], quotas: QuotaManager,
             upstream: Callable[[], UpstreamHealth] | None = None,
             readiness: Callable[[], tuple[bool, str]] | None = None) -> None:
        """Give the scrape-time gauges what they read; the clock becomes the proxy's loop clock."""
        self.quotas = quotas
        self.upstream = upstream
        self.readiness = readiness
        if self._clock is None:
            self._clock = clock

    def now(self) -> float:
        """The clock entities are stamped with: the one given, or the proxy's loop clock once bound."""
        if self._clock is None:
            raise RuntimeError("PrometheusObserver has no clock yet: bind() it to the loop, or give it clock=")
        return self._clock()

    # -- entities ------------------------------------------------------------------------------
    def _entity(self, p: Principal) -> _Entity:
        e = self._entities.get(p)
        if e is None:
            if len(self._entities) >= self.max_entities and p != _OTHER_PRINCIPAL:
                return self._entity(_OTHER_PRINCIPAL)
            e = self._entities[p] = _Entity(p.user, p.client_id, self.now())
        return e

    def principals(self) -> list[Principal]:
        """The principals seen within `entity_expiry_seconds` (the `other` bucket left out)."""
        return [p for p in self._entities if p != _OTHER_PRINCIPAL]

    def requests_of(self, p: Principal) -> dict[str, int]:
        """`p`'s requests since it was first seen, by API name (empty for one not seen lately)."""
        e = self._entities.get(p)
        return {} if e is None else {_api_name(api): n for api, n in sorted(e.requests.items())}

    @property
    def entity_count(self) -> int:
        """Distinct label sets held, the `other` bucket included."""
        return len(self._entities)

    def expire(self, now: float | None = None) -> int:
        """Drop entities idle for `entity_expiry_seconds`, and the quota sensors idle as long."""
        now = self.now() if now is None else now
        limit = self.entity_expiry_seconds
        stale = [p for p, e in self._entities.items() if now - e.seen >= limit]
        for p in stale:
            self._topic_series -= len(self._entities.pop(p).topics)
        self.recent.forget(stale)
        self.recent_observed.forget(stale)
        self.clients.expire(now, limit)
        if self.quotas is not None:
            self.quotas.expire(now, limit)
        return len(stale)

    async def maintain(self, stop: asyncio.Event) -> None:
        """Expire idle entities every tenth of the expiry time (1 s to 60 s) until `stop` is set."""
        interval = min(max(self.entity_expiry_seconds / 10, 1.0), 60.0)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            self.expire()

    # -- hooks (per request: a lookup and an addition each) ------------------------------------
    def connection_opened(self, listener: str) -> None:
        self._connections[listener] = self._connections.get(listener, 0) + 1

    def connection_closed(self, listener: str, reason: str) -> None:
        self._connections[listener] = self._connections.get(listener, 0) - 1
        self._closed[reason] = self._closed.get(reason, 0) + 1

    def connection_refused(self, listener: str, reason: str) -> None:
        self._closed[reason] = self._closed.get(reason, 0) + 1

    def request(self, principal: Principal, api_key: int, nbytes: int) -> None:
        e = self._entity(principal)
        e.seen = self.now()  # idleness is measured from the last request
        e.requests[api_key] = e.requests.get(api_key, 0) + 1

    def response(self, principal: Principal, api_key: int, nbytes: int, upstream_seconds: float) -> None:
        h = self._latency.get(api_key)
        if h is None:
            h = self._latency[api_key] = _Latency()
        h.observe(upstream_seconds)

    def _traffic(self, principal: Principal, direction: str, nbytes: int, records: int) -> None:
        traffic = self._entity(principal).traffic
        totals = traffic.get(direction)
        if totals is None:
            totals = traffic[direction] = [0, 0]
        totals[0] += nbytes
        totals[1] += records

    def produced(self, principal: Principal, nbytes: int, records: int) -> None:
        self._traffic(principal, "produce", nbytes, records)

    def fetched(self, principal: Principal, nbytes: int, records: int) -> None:
        self._traffic(principal, "fetch", nbytes, records)

    def topic_bytes(self, principal: Principal, direction: str, sizes: tuple[tuple[str, int], ...]) -> None:
        topics = self._entity(principal).topics
        for topic, nbytes in sizes:
            key = (direction, topic)
            if key not in topics:
                if self._topic_series >= self.max_entities:
                    key = (direction, OTHER)   # past the cap: one more series per entity at most
                if key not in topics:
                    self._topic_series += 1
                    topics[key] = 0
            topics[key] += nbytes

    def handler_time(self, principal: Principal, seconds: float) -> None:
        e = self._entity(principal)
        e.handler = (e.handler or 0.0) + seconds

    def throttled(self, principal: Principal, quota_type: QuotaType, seconds: float) -> None:
        throttle = self._entity(principal).throttle
        totals = throttle.get(quota_type)
        if totals is None:
            totals = throttle[quota_type] = [0.0, 0]
        totals[0] += seconds
        totals[1] += 1
        self.recent.add(principal, quota_type, seconds, self.now())

    def observed_throttled(self, principal: Principal, quota_type: QuotaType, seconds: float) -> None:
        # What enforcing would have done, in units that add up: the entity would have been muted from
        # now until the latest of its would-be throttles ends (counted as that time passes, so at most
        # a second a second, however many requests overlap), and this request throttled.
        now = self.now()
        observed = self._entity(principal).observed
        totals = observed.get(quota_type)
        if totals is None:
            totals = observed[quota_type] = [0.0, 0, now, now]
        _fold_observed(totals, now)
        totals[1] += 1
        longer = max(0.0, now + seconds - max(now, totals[2]))   # what this one adds to the would-be mute
        totals[2] = max(totals[2], now + seconds)
        self.recent_observed.add(principal, quota_type, seconds, now, counted=longer)

    def mute_started(self, principal: Principal, quota_type: QuotaType, at: float | None = None) -> None:
        # A mute counts from its decision (`at`), which a long frame's handling can precede by
        # milliseconds, until it was due to end (`mute_ended`): exactly what the client was told.
        now = self.now()
        principal = self._bucket(principal)
        running = self._muted.get((principal, quota_type))
        if running is None:
            running = self._muted[principal, quota_type] = [0, 0.0, 0.0]
        running[0] += 1
        running[1] += now if at is None else min(at, now)

    def mute_ended(self, principal: Principal, quota_type: QuotaType, due: float | None = None) -> None:
        principal = self._bucket(principal)
        running = self._muted.get((principal, quota_type))
        if running is None:
            return
        # A mute counts until its throttle was due to end: a timer that fired late on a busy loop
        # held the socket longer, but so would the busy loop have held an unmuted one.
        now = self.now()
        running[0] -= 1
        running[2] += now if due is None else min(now, due)
        if running[0] <= 0:   # none left: what they lasted, ends less starts, is the entity's for good
            totals = self._entity(principal).muted
            totals[quota_type] = totals.get(quota_type, 0.0) + running[2] - running[1]
            del self._muted[principal, quota_type]

    def _bucket(self, p: Principal) -> Principal:
        """The principal whose entity counts `p`'s (the `other` bucket's past `max_entities`)."""
        return p if self._entity(p) is self._entities.get(p) else _OTHER_PRINCIPAL

    def _muted_seconds(self, now: float) -> dict[Principal, dict[str, float]]:
        """Each entity's connection-seconds muted per quota, mutes still running counted up to `now`.
        Summed from every mute's own start and end (which connection's is which does not matter:
        ends and starts add up), and never less than a scrape showed before, so the counter cannot go
        back when a late timer ends a mute a scrape had counted past its due time."""
        out: dict[Principal, dict[str, float]] = {p: dict(e.muted) for p, e in self._entities.items() if e.muted}
        for (principal, quota), (n, starts, ends) in self._muted.items():
            seconds = out.setdefault(principal, {})
            seconds[quota] = seconds.get(quota, 0.0) + ends + n * now - starts
        for principal, seconds in out.items():
            shown = self._entity(principal).muted_shown
            for quota, value in seconds.items():
                seconds[quota] = shown[quota] = max(shown.get(quota, 0.0), value)
        return out

    def upstream_anomaly(self, kind: str) -> None:
        self._anomalies[kind] = self._anomalies.get(kind, 0) + 1

    def config_reload(self, result: str) -> None:
        self._reloads[result] = self._reloads.get(result, 0) + 1

    # -- the scrape (on the loop's thread: it reads live state) ---------------------------------
    def families(self) -> list[Metric]:
        return [*self._event_families(), *self._state_families()]

    def _event_families(self) -> Iterator[Metric]:
        def counter(name: str, doc: str, labels: tuple[str, ...]) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=labels)

        nbytes = counter("kqp_bytes", "Frame bytes of Produce requests and Fetch responses, size prefix included",
                         ("direction", *ENTITY))
        records = counter("kqp_records", "Records in Produce requests and Fetch responses", ("direction", *ENTITY))
        requests = counter("kqp_requests", "Requests received from clients", ("api", *ENTITY))
        handler = counter("kqp_request_handler_seconds", "Event-loop time spent on an entity's frames, both "
                          "directions (what request_percentage measures: the loop thread's CPU time while a "
                          "request_percentage is configured, wall time otherwise)", ENTITY)
        throttle = counter("kqp_throttle_seconds", "Throttle time given to responses (the throttle_time_ms "
                           "clients see), by the quota that caused it", ("quota", *ENTITY))
        throttled = counter("kqp_throttled_responses", "Responses (and acks=0 requests) throttled, by the "
                            "quota that caused it", ("quota", *ENTITY))
        muted = counter("kqp_muted_seconds", "Seconds client connections spent muted by a throttle, summed "
                        "over the entity's connections, by the quota that caused it", ("quota", *ENTITY))
        observed = counter("kqp_observed_muted_seconds", "Seconds the entity would have been muted had its quotas in "
                           "mode observe been enforced, at most one a second (nothing was told or muted), by the "
                           "quota that would have caused it", ("quota", *ENTITY))
        observed_n = counter("kqp_observed_throttled_requests", "Requests quotas in mode observe would have "
                             "throttled, by the quota that would have caused it", ("quota", *ENTITY))
        topic_bytes = counter("kqp_topic_bytes", "Record bytes per topic of Produce requests and Fetch responses "
                              "(metrics.topic_bytes)", ("direction", *ENTITY, "topic"))
        now = self.now()
        muted_seconds = self._muted_seconds(now)
        for principal, e in self._entities.items():
            who = (e.user, e.client_id)
            for direction, (b, r) in e.traffic.items():
                nbytes.add_metric((direction, *who), b)
                records.add_metric((direction, *who), r)
            for api, n in e.requests.items():
                requests.add_metric((_api_name(api), *who), n)
            if e.handler is not None:
                handler.add_metric(who, e.handler)
            for quota, (seconds, n) in e.throttle.items():
                throttle.add_metric((quota, *who), seconds)
                throttled.add_metric((quota, *who), n)
            for quota, seconds in muted_seconds.get(principal, {}).items():
                muted.add_metric((quota, *who), seconds)
            for quota, totals in e.observed.items():
                _fold_observed(totals, now)
                observed.add_metric((quota, *who), totals[0])
                observed_n.add_metric((quota, *who), totals[1])
            for (direction, topic), b in e.topics.items():
                topic_bytes.add_metric((direction, *who, topic), b)
        yield from (nbytes, records, requests, handler, throttle, throttled, muted, observed, observed_n)
        if self.wants_topics:
            yield topic_bytes
        connections = GaugeMetricFamily("kqp_connections", "Open client connections", labels=("listener",))
        for listener, n in self._connections.items():
            connections.add_metric((listener,), n)
        closed = counter("kqp_connections_closed", "Client connections closed, by reason", ("reason",))
        for reason, n in self._closed.items():
            closed.add_metric((reason,), n)
        reloads = counter("kqp_config_reloads", "Config file reloads, by result", ("result",))
        for result, n in self._reloads.items():
            reloads.add_metric((result,), n)
        anomalies = counter("kqp_upstream_anomalies", "Upstream responses passed on without kqp's usual "
                            "handling: unawaited (answering no request in flight: dropped), unreadable "
                            "(throttle_time_ms not reachable: forwarded unchanged)", ("kind",))
        for kind, n in self._anomalies.items():
            anomalies.add_metric((kind,), n)
        latency = HistogramMetricFamily("kqp_upstream_request_duration_seconds", "From forwarding a request "
                                        "to the upstream to reading its response", labels=("api",))
        for api, h in self._latency.items():
            latency.add_metric((_api_name(api),), h.buckets(), h.total)
        yield from (connections, closed, reloads, anomalies, latency)
        yield from self.clients.families()

    def _state_families(self) -> Iterator[Metric]:
        build = GaugeMetricFamily("kqp_build_info", "1: kqp's version, its Python, and whether the request path "
                                  "runs compiled by mypyc or as Python, and why",
                                  labels=("version", "python", "request_path", "reason"))
        build.add_metric(_build_labels(), 1)
        yield build
        yield GaugeMetricFamily("kqp_entities", "Entity label sets held (the other bucket included)",
                                value=len(self._entities))
        yield GaugeMetricFamily("kqp_muted_connections", "Client connections muted by a throttle now",
                                value=sum(n for n, _, _ in self._muted.values()))
        queue = GaugeMetricFamily("kqp_delay_queue_size", "Delay-queue entries (connections muted by a "
                                  "throttle) by the quota that caused them", labels=("quota",))
        by_quota = dict.fromkeys(QUOTA_TYPES, 0)
        muted_by: dict[tuple[str, str], int] = {}
        for (principal, quota), (n, _, _) in self._muted.items():
            n = int(n)
            by_quota[quota] = by_quota.get(quota, 0) + n
            who = (principal.user, principal.client_id)
            muted_by[who] = muted_by.get(who, 0) + n
        for quota, n in by_quota.items():
            queue.add_metric([quota], n)
        yield queue
        by_entity = GaugeMetricFamily("kqp_entity_muted_connections", "Muted client connections per entity "
                                      "whose throttle muted them", labels=ENTITY)
        for who, n in muted_by.items():
            by_entity.add_metric(who, n)
        yield by_entity
        if self.quotas is not None:
            now = self.now()
            yield from quota_families(self.quotas, (p for p in self._entities if p != _OTHER_PRINCIPAL), now)
            yield from pool_families(self.quotas.pools.snapshot(now))
        if self.upstream is not None:
            age, fresh = self.upstream()
            yield GaugeMetricFamily("kqp_upstream_up", "1 while the upstream answered Metadata within 3 x "
                                    "metadata_refresh_ms", value=1.0 if age is not None and age <= fresh else 0.0)
            if age is not None:
                yield GaugeMetricFamily("kqp_upstream_metadata_age_seconds",
                                        "Seconds since the upstream last answered Metadata", value=age)
        if self.readiness is not None:
            yield GaugeMetricFamily("kqp_ready", "1 while /readyz answers 200",
                                    value=1.0 if self.readiness()[0] else 0.0)


@functools.cache
def _build_labels() -> tuple[str, str, str, str]:
    """kqp_build_info's labels: what this process runs, fixed once its modules are imported."""
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    build = describe()
    return version, platform.python_version(), build.request_path, build.reason


class _ScrapeCollector:
    """Hands the registry the observer's families; `prepare` freezes them on the loop's thread so
    the text exposition can be rendered in a worker thread."""

    def __init__(self, observer: PrometheusObserver) -> None:
        self._observer = observer
        self._prepared: list[Metric] | None = None

    def prepare(self) -> None:
        self._prepared = self._observer.families()

    def collect(self) -> Iterable[Metric]:
        prepared, self._prepared = self._prepared, None
        return prepared if prepared is not None else self._observer.families()


def prepare_scrape(observer: ProxyObserver) -> None:
    """Freeze the observer's series before rendering /metrics off the event loop's thread."""
    if isinstance(observer, PrometheusObserver):
        observer._scrape.prepare()


def _api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, str(api_key))


def _fold_observed(totals: list[float], now: float) -> None:
    """Count the would-be mute of `totals` (`_Entity.observed`) up to `now`: what of it has passed
    since it was last counted."""
    end = min(now, totals[2])
    if end > totals[3]:
        totals[0] += end - totals[3]
    totals[3] = now
