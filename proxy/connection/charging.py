"""What a request and its response cost their entity: the one room where quotas are charged.

Each request is charged through one pair of calls (Kafka's KafkaApis records every quota of a
request, then throttles once):

* `charge_request`, when the request has been read: what the request itself carries (a Produce
  request's bytes, records and batches), to the quotas that count it;
* `charge_response`, when the response is back (for a request that has none, an acks=0 Produce,
  right after `charge_request`): what the response carries (a Fetch response's bytes, records and
  batches), the request quotas (handler time, one request) unless the request is exempt, and the
  request's earlier violations (a mutation throttle net of the upstream's latency).

Each returns every violation known then; the throttling room (`throttling.py`) turns them into one
throttle. What a request or response used is described by its API's handler (`handlers/`) on its
`InFlight` record as a `Usage`; which quota types a usage feeds is decided here, so a handler never
names a quota. KIP-599's strict admission is the one decision a policy takes itself (the mutation
gate admits topic by topic before anything is forwarded): its violations arrive on the record.

The handlers ask the guards here before reading more than a header: record counts only when a record
or batch quota (or the metrics observer) wants them, so byte-rate-only deployments never walk a
Produce request's partitions. Everything is charged with the loop time the core was handed (`now`):
no clock is read.

Sizes are charged as Kafka counts them: a Produce request is its header and body without the
4-byte size prefix (RequestChannel.Request.sizeInBytes), a Fetch response its body plus 4
(FetchResponse.sizeOf); the metrics count whole frames, size prefix included (`Usage`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kqp.quotas.adaptive_pools import AdaptivePool
from kqp.quotas.manager import QuotaManager, Violation
from kqp.quotas.model import Principal, QuotaType

from .exchange import InFlight
from .hooks import ProxyObserver

__all__ = ["Charging", "net_of_elapsed"]

MUTATION = QuotaType.CONTROLLER_MUTATION_RATE
PRODUCED, FETCHED = QuotaType.PRODUCER_BYTE_RATE, QuotaType.CONSUMER_BYTE_RATE   # what topic pools budget


class Charging:
    """The quota manager and the observer, charged together for each request and response."""

    __slots__ = ("fetch_cap", "observer", "pools", "quotas", "throttles_on_response")

    def __init__(self, quotas: QuotaManager, observer: ProxyObserver) -> None:
        self.quotas = quotas
        self.observer = observer
        #: The manager's pools (the same object across reloads): `pools.reads` says whether a Produce
        #: or Fetch must be looked into further for a topic pool or an adaptive pool (issues 21, 22).
        self.pools = quotas.pools
        # Asked of every Fetch and every forwarded request: the manager's own methods, no wrapper.
        #: Kafka's getMaxValueInQuotaWindow: the most a Fetch may ask for (None: no consumer quota).
        self.fetch_cap: Callable[[Principal], int | None] = quotas.fetch_max_bytes_cap
        #: Whether a quota whose throttle is known only from the response applies (one request at a time).
        self.throttles_on_response: Callable[[Principal], bool] = quotas.throttles_on_response

    # -- what the handlers ask before they read a body -----------------------------------------
    def produce_needs_counts(self, principal: Principal) -> bool:
        return self.observer.wants_records or self.quotas.counts_produce_records(principal)

    def fetch_needs_counts(self, principal: Principal) -> bool:
        return self.observer.wants_records or self.quotas.counts_fetch_records(principal)

    # -- the pair ------------------------------------------------------------------------------
    def charge_request(self, entry: InFlight, now: float) -> list[Violation]:
        """Charge what the request carries; every violation known now (the policy's included)."""
        produced = entry.produced
        if produced is None:
            return entry.violations
        principal = entry.principal
        self.observer.produced(principal, produced.frame_bytes, produced.records)
        violations = self.quotas.record_produce(principal, produced.quota_bytes, produced.records, produced.batches,
                                                now)
        if produced.topics is not None:   # a topic pool takes the principal: its bytes per topic too
            violations = violations + self.quotas.record_topic_bytes(principal, PRODUCED, produced.topics, now)
        if violations:
            entry.violations = entry.violations + violations
        return entry.violations

    def charge_response(self, entry: InFlight, now: float) -> list[Violation]:
        """Charge what the response carries and the request quotas; every violation of the request."""
        principal = entry.principal
        violations = entry.violations
        if violations:
            violations = net_of_elapsed(violations, now - entry.sent_at)
        fetched = entry.fetched
        if fetched is not None:
            self.observer.fetched(principal, fetched.frame_bytes, fetched.records)
            if found := self.quotas.record_fetch(principal, fetched.quota_bytes, fetched.records, fetched.batches,
                                                 now):
                violations = violations + found
            if fetched.topics is not None and (found := self.quotas.record_topic_bytes(principal, FETCHED,
                                                                                       fetched.topics, now)):
                violations = violations + found
        if not entry.exempt and (found := self.quotas.record_request(principal, entry.handler_seconds, now)):
            violations = violations + found
        self.observer.handler_time(principal, entry.handler_seconds)
        return violations

    def refund_response(self, entry: InFlight, now: float) -> None:
        """Take the response's charge back: a throttled Fetch answered empty gave the client none of it
        (Kafka's unrecordQuotaSensor). The metrics keep what crossed kqp."""
        fetched = entry.fetched
        if fetched is not None:
            self.quotas.unrecord_fetch(entry.principal, fetched.quota_bytes, fetched.records, fetched.batches, now)
            if fetched.topics is not None:
                self.quotas.record_topic_bytes(entry.principal, FETCHED, fetched.topics, now, refund=True)

    def unanswered(self, in_flight: Iterable[InFlight], upstream_lost: bool) -> None:
        """The connection closed with these requests unanswered: the adaptive pools watching them stop
        waiting for them, and each hears of one disconnect if the upstream went away (issue 22)."""
        watching: dict[AdaptivePool, None] = {}
        for entry in in_flight:
            for pool in entry.handler.watching:
                pool.answered(entry)
                watching[pool] = None
        if upstream_lost:
            for pool in watching:
                pool.disconnect()


def net_of_elapsed(violations: list[Violation], elapsed: float) -> list[Violation]:
    """A mutation throttle counts from when it was recorded, not from when the response leaves:
    Kafka's ControllerMutationQuota deducts the time since recording (the upstream's latency)."""
    if elapsed <= 0 or not any(v.quota_type == MUTATION for v in violations):
        return violations
    return [Violation(v.quota_type, max(0.0, v.throttle_seconds - elapsed), v.key) if v.quota_type == MUTATION
            else v for v in violations]
