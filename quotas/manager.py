"""The quota engine the proxy calls: charge usage to sensors, get back the throttles it earns.

One `QuotaManager` holds every sensor, keyed by quota type and `QuotaKey` (Kafka keeps one
ClientQuotaManager per quota type; one object here resolves a request's several quotas with one
cache lookup). Each `record_*` call records first and then checks, as Kafka's `Sensor.record` does,
and returns one `Violation` per quota exceeded, with its pace for clients that do not back off
(rates/sensor.py); `throttle.combine` turns them into the request's throttle. A `record_*` whose quota
types no entity configures returns at once, without resolving the principal.

Capacity pools live in `self.pools` (pools/pool_set.py): the same `record_*` call charges a principal's pool
too, and the pool's throttles come back beside the entity quotas', so the smaller limit wins. Given
a `FleetLedger`, every sensor is created with its `SharedUsage` and throttles on the fleet's rate
(fleet/ledger.py); the manager keeps the ledger's sensors in step with its own. Time is an argument
everywhere (`now`, monotonic seconds): this module never reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kqp.quotas.changes import describe_changes
from kqp.quotas.entities import MAX_CACHED_PRINCIPALS, Resolution, resolutions, resolve_key
from kqp.quotas.fleet.ledger import FleetLedger, sensor_name
from kqp.quotas.model import (
    MUTATION,
    OBSERVE,
    QUOTA_TYPES,
    TOKEN_BUCKET,
    ChargeKind,
    EntitySpec,
    Principal,
    QuotaKey,
    QuotaSettings,
    QuotaType,
)
from kqp.quotas.pools.pool_set import Pools
from kqp.quotas.rates.sensor import QuotaSensor
from kqp.quotas.rates.throttle import CAPPED_TYPES, Violation, combine

__all__ = ["QuotaManager", "SensorState", "Violation", "combine"]

_PRODUCE_COUNTS = frozenset({QuotaType.PRODUCER_RECORD_RATE, QuotaType.PRODUCER_BATCH_RATE})
_FETCH_COUNTS = frozenset({QuotaType.CONSUMER_RECORD_RATE, QuotaType.CONSUMER_BATCH_RATE})
_REQUEST = (QuotaType.REQUEST_RATE, QuotaType.REQUEST_PERCENTAGE)
# What a Fetch's response is charged to: its throttle is known only once the response is back.
_FETCH_TYPES = frozenset({QuotaType.CONSUMER_BYTE_RATE, QuotaType.CONSUMER_RECORD_RATE, QuotaType.CONSUMER_BATCH_RATE})
# What one kind of charge records into for a principal (`QuotaManager._charged_by`), and the kinds.
Charged = tuple[tuple[QuotaType, int, QuotaSensor, Resolution], ...]
_PRODUCED, _FETCHED, _REQUESTED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class SensorState:
    """One sensor as metrics and `kqp top` see it."""

    quota_type: QuotaType
    key: QuotaKey
    entity: EntitySpec | None  # the configured entity whose quota applies
    rate: float  # units per second over the sampled window (mutations/s for the token bucket)
    limit: float
    last_throttle_seconds: float
    tokens: float | None  # token bucket credit (controller_mutation_rate, and algorithm: token_bucket)
    idle_seconds: float


class QuotaManager:
    """Sensors per (quota type, QuotaKey), created on first use, updated live, expired when idle."""

    def __init__(self, settings: QuotaSettings, now: float, fleet: FleetLedger | None = None) -> None:
        # `now` is accepted for symmetry with every other call; sensors are created lazily, each
        # with the time of its first use, so nothing needs the start time yet.
        self._sensors: dict[QuotaType, dict[QuotaKey, QuotaSensor]] = {t: {} for t in QUOTA_TYPES}
        # Per kind of charge (`_PRODUCED`, ...), per principal, what it records into: (quota type, value
        # index, sensor, resolution), found once, not per request. Emptied whenever a sensor or a setting goes.
        self._charged: tuple[dict[Principal, Charged], ...] = ({}, {}, {})
        self.fleet = fleet
        if fleet is not None:
            fleet.configure(settings.window_size_seconds, settings.window_count)
        self.pools = Pools(settings, now, fleet)
        self._apply(settings)

    def _apply(self, settings: QuotaSettings) -> None:
        self._settings = settings
        self._charged = ({}, {}, {})
        on = settings.quota_types
        self._produce = tuple(p for p in ChargeKind.PRODUCE.types if p[0] in on)
        self._fetch = tuple(f for f in ChargeKind.FETCH.types if f[0] in on)
        self._request = tuple(t for t in _REQUEST if t in on)
        #: Whether handler time is charged (request_percentage, which no pool takes): the core then
        #: times its handlers by the loop thread's CPU clock, which a busy host's preemption does not run.
        self.handler_cpu = QuotaType.REQUEST_PERCENTAGE in on
        self._mutation = MUTATION in on
        self._produce_counts = bool(_PRODUCE_COUNTS & on)
        self._fetch_counts = bool(_FETCH_COUNTS & on)
        # Whether any principal pool charges the kind: plain attributes, as read on every request.
        self._pooled_produce, self._pooled_fetch, self._pooled_request = self.pools.kinds
        # Whether any quota is observed: only then do the questions below look at each quota's mode.
        self._observing = settings.mode == OBSERVE or OBSERVE in settings.modes.values() or any(
            settings.observes_pool(pool) for pool in settings.pools)

    @property
    def settings(self) -> QuotaSettings:
        return self._settings

    @property
    def enabled(self) -> bool:
        """Any entity configured at all."""
        return self._settings.enabled

    # -- settings ------------------------------------------------------------------------------
    def update_settings(self, settings: QuotaSettings, now: float) -> list[str]:
        """Swap settings live; return one human-readable line per change, for the log.

        Sensors whose key still resolves keep their measurement and take the new limit (as Kafka
        updates a live metric's quota): a token bucket keeps its tokens, debt included, and refills
        at the new rate up to the new burst; sensors nothing charges any more are released at once.
        A new window size or count changes what every sample means, so then all measurements
        restart. A sensor whose algorithm changes (sampled, steady, token_bucket) restarts too: samples
        say nothing about tokens, and a bucket keeps no samples worth enforcing on; the next request
        creates it afresh (a full bucket, or empty samples), as for a new entity.
        Pools keep their members' measurements likewise (pools/pool_set.py); `now` dates what they divide anew.
        """
        old = self._settings
        lines = describe_changes(old, settings)
        released = restarted = 0
        new_windows = (old.window_size_seconds, old.window_count) != (settings.window_size_seconds,
                                                                      settings.window_count)
        if new_windows:
            released = self.sensor_count
            self._sensors = {t: {} for t in QUOTA_TYPES}
            if self.fleet is not None:
                self.fleet.configure(settings.window_size_seconds, settings.window_count)
        else:
            for quota_type, sensors in self._sensors.items():
                for key, sensor in list(sensors.items()):
                    found = resolve_key(settings, quota_type, key)
                    if found is None or _algorithm(settings, quota_type, found) != sensor.algorithm:
                        del sensors[key]
                        self._forget(quota_type, key)
                        if found is None:
                            released += 1
                        else:
                            restarted += 1
                        continue
                    sensor.entity = found.entity
                    if found.limit != sensor.limit:
                        sensor.set_limit(found.limit)
        lines += self.pools.update(settings, now, restart=new_windows)
        self._apply(settings)
        if released:
            lines.append(f"released {released} sensor(s) whose quota no longer applies")
        if restarted:
            lines.append(f"restarted {restarted} sensor(s) whose algorithm changed")
        return lines

    # -- recording -----------------------------------------------------------------------------
    def _sensor(self, quota_type: QuotaType, found: Resolution, now: float) -> QuotaSensor:
        sensors = self._sensors[quota_type]
        sensor = sensors.get(found.key)
        if sensor is None:
            s = self._settings
            cap = s.window_size_seconds if quota_type in CAPPED_TYPES else None
            fleet = self.fleet
            shared = None if fleet is None else fleet.usage_for(sensor_name(quota_type, found.key), now)
            sensor = sensors[found.key] = QuotaSensor(
                found.limit, s.window_size_seconds, s.window_count, now,
                cap=cap, algorithm=_algorithm(s, quota_type, found), entity=found.entity, shared=shared,
            )
        elif sensor.limit != found.limit:
            # update_settings re-checks every key, so this is only a safety net: the latest
            # resolution wins.
            sensor.entity = found.entity
            sensor.set_limit(found.limit)
        return sensor

    def _charged_by(self, kind: int, p: Principal, now: float) -> Charged:
        """What `p`'s charges of `kind` record into (`_charged`), their sensors made now if new."""
        known = self._charged[kind]
        charged = known.get(p)
        if charged is None:
            found = resolutions(self._settings, p)
            types = (self._produce, self._fetch, tuple((t, int(t is not QuotaType.REQUEST_RATE))
                                                       for t in self._request))[kind]
            if len(known) >= MAX_CACHED_PRINCIPALS:
                known.clear()
            charged = known[p] = tuple((t, index, self._sensor(t, res, now), res) for t, index in types
                                       if (res := found.get(t)) is not None)
        return charged

    def _charge_all(self, kind: int, p: Principal, values: tuple[float, ...], now: float) -> list[Violation]:
        out: list[Violation] = []
        for quota_type, index, sensor, res in self._charged_by(kind, p, now):
            if (t := sensor.charge(values[index], now)) > 0:
                if res.observed:
                    t = sensor.forgive(t, now)
                out.append(sensor.violation(quota_type, res.key, values[index], t, now, observed=res.observed))
        return out

    def record_produce(self, p: Principal, nbytes: float, records: int, batches: int, now: float) -> list[Violation]:
        """Charge a Produce request: producer byte, record and batch rates (uncapped throttles)."""
        out = self._charge_all(_PRODUCED, p, (nbytes, records, batches), now) if self._produce else []
        if self._pooled_produce:
            self.pools.charge(p, ChargeKind.PRODUCE, (nbytes, records, batches), now, out)
        return out

    def record_fetch(self, p: Principal, nbytes: float, records: int, batches: int, now: float) -> list[Violation]:
        """Charge a Fetch response: consumer byte, record and batch rates (uncapped throttles)."""
        out = self._charge_all(_FETCHED, p, (nbytes, records, batches), now) if self._fetch else []
        if self._pooled_fetch:
            self.pools.charge(p, ChargeKind.FETCH, (nbytes, records, batches), now, out)
        return out

    @property
    def topic_pools(self) -> bool:
        """Whether any topic pool exists: the proxy reads topic names and sizes only then."""
        return bool(self.pools.topic_types)

    def record_topic_bytes(self, p: Principal, quota_type: QuotaType, sizes: Iterable[tuple[str, int]],
                           now: float, refund: bool = False) -> list[Violation]:
        """Charge a Produce request's (`producer_byte_rate`) or a Fetch response's (`consumer_byte_rate`)
        bytes per topic, `(topic, bytes)`, to the topic pools covering them for `p`; `refund` takes a
        Fetch answered empty back. Combine the violations with the same request's `record_*` ones."""
        return self.pools.charge_topics(p, quota_type, sizes, now, refund)

    def unrecord_fetch(self, p: Principal, nbytes: int, records: int, batches: int, now: float) -> None:
        """Take back a Fetch's usage (Kafka's `unrecordQuotaSensor`), for a throttled fetch
        answered empty: the client did not get those bytes, so they must not count."""
        values = (nbytes, records, batches)
        if self._pooled_fetch:
            self.pools.refund(p, ChargeKind.FETCH, values, now)
        if not self._fetch:
            return
        found = resolutions(self._settings, p)
        for quota_type, index in self._fetch:
            res = found.get(quota_type)
            if res is not None:
                self._sensor(quota_type, res, now).refund(values[index], now)

    def record_request(self, p: Principal, handler_seconds: float, now: float) -> list[Violation]:
        """Charge one request where its throttle is decided: `request_rate` counts 1,
        `request_percentage` the handler time spent on it so far.

        KIP-124: n% is n% of one thread, so handler seconds are recorded as percent-seconds
        (x 100) and their rate per second compares directly with n. `handler_seconds` is event-loop
        time the caller spent on the request's frames, never time spent waiting for the upstream
        (quotas/README.md: "Carrying a broker's request_percentage over"); the rest of it, spent on
        the response, comes with `add_handler_time`. Both throttles are capped at one window. Which
        APIs are exempt is the caller's decision.
        """
        out: list[Violation] = []
        if self._pooled_request:
            self.pools.charge(p, ChargeKind.REQUEST, (1.0,), now, out)
        if not self._request:
            return out
        values = (1.0, handler_seconds * 100.0)
        for quota_type, index, sensor, res in self._charged_by(_REQUESTED, p, now):
            value = values[index]
            if (t := sensor.charge(value, now)) > 0:
                out.append(sensor.violation(quota_type, res.key, value, t, now, observed=res.observed))
        return out

    def add_handler_time(self, p: Principal, handler_seconds: float, now: float) -> None:
        """Record handler time spent on a request after its throttle was decided (its response's),
        checking nothing: the key's next request is judged with it, as Kafka records a request's
        network-thread time (`recordNoThrottle`)."""
        if not self.handler_cpu:
            return
        for quota_type, _index, sensor, _res in self._charged_by(_REQUESTED, p, now):
            if quota_type is QuotaType.REQUEST_PERCENTAGE:
                sensor.add(handler_seconds * 100.0, now)

    # -- controller mutations (KIP-599) --------------------------------------------------------
    def record_mutations(self, p: Principal, partitions: int, now: float) -> list[Violation]:
        """Permissive quota (versions before the strict ones): admit, record, throttle ``-K/R``."""
        if not self._mutation:
            return []
        res = resolutions(self._settings, p).get(MUTATION)
        if res is None:
            return []
        if (t := (sensor := self._sensor(MUTATION, res, now)).charge(partitions, now)) <= 0:
            return []
        return [sensor.violation(MUTATION, res.key, partitions, t, now, observed=res.observed)]

    def mutation_tokens_available(self, p: Principal, now: float) -> bool:
        """Kafka's strict admit rule: a mutation is accepted iff the bucket has tokens >= 0.

        The bucket may then go negative by the whole mutation (KIP-599: a topic of any size fits).
        """
        if not self._mutation:
            return True
        res = resolutions(self._settings, p).get(MUTATION)
        if res is None:
            return True
        sensor = self._sensors[MUTATION].get(res.key)
        return sensor is None or (sensor.tokens(now) or 0.0) >= 0

    def mutation_tokens(self, p: Principal, now: float) -> float | None:
        """Tokens in `p`'s bucket at `now`, spending none; None when no mutation quota applies.

        For a caller that must foresee the strict admission of a whole request before it commits
        to it (KIP-599 answers a broker's own errors first, and knowing them may take a lookup).
        """
        if not self._mutation:
            return None
        res = resolutions(self._settings, p).get(MUTATION)
        if res is None:
            return None
        return self._sensor(MUTATION, res, now).tokens(now)

    def admit_mutations(self, p: Principal, partitions: int, now: float) -> Violation | None:
        """Strict quota (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+), per topic.

        Tokens >= 0: the topic is admitted and recorded, and None is returned: like Kafka's
        StrictControllerMutationQuota, an admitted topic does not throttle even if it drives the
        bucket negative. Tokens < 0: nothing is recorded and the Violation carries ``-K/R``,
        for the topic's THROTTLING_QUOTA_EXCEEDED (89) error and the response's throttle.
        """
        if not self._mutation:
            return None
        res = resolutions(self._settings, p).get(MUTATION)
        if res is None:
            return None
        sensor = self._sensor(MUTATION, res, now)
        if (sensor.tokens(now) or 0.0) >= 0:
            sensor.add(partitions, now)
            return None
        return Violation(MUTATION, sensor.throttle(now), res.key, observed=res.observed)

    def add_mutations(self, p: Principal, partitions: int, now: float) -> None:
        """Record strictly admitted mutations without a check: an admitted topic never throttles,
        even when it drives the bucket negative (StrictControllerMutationQuota)."""
        if not self._mutation:
            return
        res = resolutions(self._settings, p).get(MUTATION)
        if res is not None:
            self._sensor(MUTATION, res, now).add(partitions, now)

    def mutation_debt_seconds(self, p: Principal, tokens: float, now: float) -> float:
        """``-K/R`` for a bucket of `p`'s at `tokens` (< 0): how long a strict rejection throttles, foreseen
        before the request's admitted topics are recorded. A blocked key (rate 0): its span."""
        res = resolutions(self._settings, p).get(MUTATION)
        if res is None or tokens >= 0:
            return 0.0
        sensor = self._sensor(MUTATION, res, now)
        rate = sensor.bucket.rate if sensor.bucket is not None else 0.0
        return sensor.span if rate <= 0 else -tokens / rate

    def mutation_rejection(self, p: Principal, now: float) -> list[Violation]:
        """The throttle of a strict request whose topics were refused with 89: the bucket's ``-K/R``."""
        if not self._mutation:
            return []
        res = resolutions(self._settings, p).get(MUTATION)
        if res is None:
            return []
        return [Violation(MUTATION, self._sensor(MUTATION, res, now).throttle(now), res.key, observed=res.observed)]

    # -- queries -------------------------------------------------------------------------------
    def counts_produce_records(self, p: Principal) -> bool:
        """Whether a record or batch rate applies to `p`'s Produce (else counting is wasted work)."""
        if self._pooled_produce and self.pools.applies(p, _PRODUCE_COUNTS):
            return True
        if not self._produce_counts:
            return False
        return not _PRODUCE_COUNTS.isdisjoint(resolutions(self._settings, p))

    def counts_fetch_records(self, p: Principal) -> bool:
        """Whether a record or batch rate applies to `p`'s Fetch responses."""
        if self._pooled_fetch and self.pools.applies(p, _FETCH_COUNTS):
            return True
        if not self._fetch_counts:
            return False
        return not _FETCH_COUNTS.isdisjoint(resolutions(self._settings, p))

    def charges_fetches(self, p: Principal, enforced: bool = False) -> bool:
        """Whether `p`'s Fetch responses are charged (a consumer quota, consumer pool or consumer topic
        pool takes `p`), so that a Fetch's throttle is decided when its response is back; `enforced`:
        whether an enforced one does (an observed quota holds nothing back)."""
        enforced = enforced and self._observing   # without an observed quota anywhere, every one is enforced
        if self._pooled_fetch and self.pools.applies(p, _FETCH_TYPES, enforced):
            return True
        if self.pools.reads[ChargeKind.FETCH] and self.pools.wants_topics(p, QuotaType.CONSUMER_BYTE_RATE, enforced):
            return True
        if not self._fetch:
            return False
        found = resolutions(self._settings, p)
        return any((res := found.get(t)) is not None and not (enforced and res.observed) for t in _FETCH_TYPES)

    def fetch_max_bytes_cap(self, p: Principal, now: float | None = None) -> int | None:
        """The most one Fetch may return without being bound to be throttled, or None.

        Kafka's getMaxValueInQuotaWindow: consumer_byte_rate x (window_count - 1) x window_size,
        with the smaller of the entity's quota and its pool member's current one. A steady quota's
        (given `now`) is also no more than its tokens plus one window of quota: a consumer back from
        its throttle fetches a window's worth, so its bytes follow the quota's line a window at a time.
        An observed quota caps nothing: it changes no request.
        """
        s = self._settings
        span = (s.window_count - 1) * s.window_size_seconds
        caps: list[float] = []
        if self._fetch:
            res = resolutions(self._settings, p).get(QuotaType.CONSUMER_BYTE_RATE)
            if res is not None and not res.observed:
                caps.append(_fetch_cap(res.limit, span, self._sensors[QuotaType.CONSUMER_BYTE_RATE].get(res.key), now))
        if self._pooled_fetch:
            pooled = self.pools.quota(p, QuotaType.CONSUMER_BYTE_RATE, enforced=True)
            if pooled is not None:
                caps.append(_fetch_cap(pooled, span, self.pools.sensor(p, QuotaType.CONSUMER_BYTE_RATE), now))
        return int(min(caps)) if caps else None

    def observed(self, p: Principal, quota_type: QuotaType) -> bool:
        """Whether `p`'s quota of `quota_type` is observed (False also when none applies)."""
        res = resolutions(self._settings, p).get(quota_type)
        return res is not None and res.observed

    def limits(self, p: Principal) -> dict[str, tuple[QuotaKey, float]]:
        """The quota in force for `p`, per configured quota type, with the key it is charged to."""
        return {t: (r.key, r.limit) for t, r in resolutions(self._settings, p).items()}

    def sensor(self, quota_type: QuotaType, key: QuotaKey) -> QuotaSensor | None:
        """The sensor of `key` for `quota_type`, if one is measuring (for `kqp explain`)."""
        return self._sensors[quota_type].get(key)

    @property
    def sensor_count(self) -> int:
        return sum(len(sensors) for sensors in self._sensors.values())

    def snapshot(self, now: float) -> list[SensorState]:
        """Every sensor's current rate, limit and last throttle (measuring purges idle samples)."""
        out: list[SensorState] = []
        for quota_type, sensors in self._sensors.items():
            for key, sensor in sensors.items():
                out.append(SensorState(
                    quota_type, key, sensor.entity, sensor.measure(now), sensor.limit, sensor.last_throttle,
                    sensor.tokens(now), now - sensor.last_record,
                ))
        return out

    def expire(self, now: float, idle_seconds: float) -> int:
        """Drop sensors (pool members' too) not recorded for `idle_seconds` or more; return how many.

        Kafka expires quota sensors after an hour of inactivity; a re-created sensor starts empty,
        which is what an idle entity's purged samples would read as anyway.
        """
        dropped = 0
        for quota_type, sensors in self._sensors.items():
            stale = [key for key, sensor in sensors.items() if now - sensor.last_record >= idle_seconds]
            for key in stale:
                del sensors[key]
                self._forget(quota_type, key)
            dropped += len(stale)
        if dropped:
            self._charged = ({}, {}, {})   # (what _responding holds is no sensor: it stays)
        return dropped + self.pools.expire(now, idle_seconds)

    def _forget(self, quota_type: QuotaType, key: QuotaKey) -> None:
        if self.fleet is not None:
            self.fleet.forget(sensor_name(quota_type, key))


def _algorithm(settings: QuotaSettings, quota_type: QuotaType, found: Resolution) -> str:
    """How the sensor measures: KIP-599's token bucket for mutations always, else as the entity's
    (or the section's) `algorithm` says."""
    return TOKEN_BUCKET if quota_type == MUTATION else settings.algorithm_for(found.entity)


def _fetch_cap(limit: float, span: float, sensor: QuotaSensor | None, now: float | None) -> float:
    """One consumer quota's cap on a Fetch (`QuotaManager.fetch_max_bytes_cap`)."""
    cap = limit * span
    if sensor is None or not sensor.steady or now is None:
        return cap
    tokens = sensor.tokens(now) or 0.0
    return min(cap, max(tokens, 0.0) + limit * sensor.window)
