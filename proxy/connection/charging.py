"""What a request and its response cost their entity: the one room where quotas are charged.

Kafka's KafkaApis records every quota of a request in one place and unrecords it in the same place.
Here that place is `Charging`, and nothing else charges or refunds a quota: the core hands it each
request's plan when the request is read (`charge_request`) and its reply when the response is back
(`charge_reply`; for an acks=0 Produce both at once), and a withheld Fetch's refund (`refund`). A
request's quotas are all charged where its throttle is decided: as it is read, request quotas
included (its handler time so far), unless its response is charged (a Fetch under a consumer quota),
then with the response; handler time spent after the decision is recorded unchecked, for the key's
next request. The mutation gate and the handlers only name charges in their plans (`plans.py`); the
adaptive pools' feeds go through here too. The guards below tell a handler what is worth reading
before it reads more than a header. Sizes are charged as Kafka counts them (`Usage.quota_bytes`), the
metrics count whole frames; `now` is the loop time the core was handed: no clock is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kqp.quotas.charges import MutationCharge, MutationRule
from kqp.quotas.manager import QuotaManager, Violation
from kqp.quotas.model import Principal, QuotaType
from kqp.quotas.pools.adaptive import AdaptivePool

from .hooks import ProxyObserver
from .plans import Flight, Reply, Signals, Usage

__all__ = ["Charging"]

PRODUCED, FETCHED = QuotaType.PRODUCER_BYTE_RATE, QuotaType.CONSUMER_BYTE_RATE   # what topic pools budget
PERMISSIVE, REJECTED, SETTLE = MutationRule.PERMISSIVE, MutationRule.REJECTED, MutationRule.SETTLE


class Charging:
    """The quota manager and the observer, charged together for each request and response."""

    __slots__ = ("charges_fetches", "fetch_cap", "observer", "pools", "quotas")

    def __init__(self, quotas: QuotaManager, observer: ProxyObserver) -> None:
        self.quotas = quotas
        self.observer = observer
        #: The manager's pools (the same object across reloads), for the handlers' questions.
        self.pools = quotas.pools
        #: Kafka's getMaxValueInQuotaWindow: the most a Fetch read at a time may ask for (None: no consumer quota).
        self.fetch_cap: Callable[[Principal, float], int | None] = quotas.fetch_max_bytes_cap
        #: Whether a principal's Fetch responses are charged (its Fetch throttle is decided then):
        #: `(principal, enforced)`, `enforced` asking for an enforced quota (observed ones hold nothing).
        self.charges_fetches: Callable[[Principal, bool], bool] = quotas.charges_fetches

    # -- what the handlers ask before they read a body -----------------------------------------
    def produce_needs_counts(self, principal: Principal) -> bool:
        return self.observer.wants_records or self.quotas.counts_produce_records(principal)

    def fetch_needs_counts(self, principal: Principal) -> bool:
        return self.observer.wants_records or self.quotas.counts_fetch_records(principal)

    # -- the request and its reply -------------------------------------------------------------
    def charge_request(self, flight: Flight, now: float) -> list[Violation]:
        """Charge what the request itself carries and, unless its throttle waits for its response,
        its request quotas (`flight.progress.handler_seconds`: the time spent on it so far); the violations found."""
        plan = flight.plan
        violations: list[Violation] = []
        if (produced := plan.produced) is not None:
            principal = flight.principal
            self.observer.produced(principal, produced.frame_bytes, produced.records)
            violations = self.quotas.record_produce(principal, produced.quota_bytes, produced.records,
                                                    produced.batches, now)
            if produced.topics is not None:   # a topic pool takes the principal (or the metrics count per topic)
                violations += self.quotas.record_topic_bytes(principal, PRODUCED, produced.topics, now)
                if self.observer.wants_topics:
                    self.observer.topic_bytes(principal, "produce", produced.topics)
        if plan.mutations:
            violations += self._mutations(plan.mutations, now)
        for pool in plan.watching:
            pool.sent(flight, now)
        if not plan.exempt and not plan.decided_on_response:
            violations += self.quotas.record_request(flight.principal, flight.progress.handler_seconds, now)
        return violations

    def charge_reply(self, flight: Flight, reply: Reply | None, now: float, seconds: float = 0.0) -> list[Violation]:
        """Charge what the response carries, `seconds` of handler time spent on it, and, where the
        request's throttle is decided now, its request quotas; the violations found (the request's
        own only where its throttle is decided now). `reply` is None for a request that has no
        response (acks=0)."""
        principal = flight.principal
        violations: list[Violation] = []
        if reply is not None:
            if (fetched := reply.fetched) is not None:
                self.observer.fetched(principal, fetched.frame_bytes, fetched.records)
                violations = self.quotas.record_fetch(principal, fetched.quota_bytes, fetched.records,
                                                      fetched.batches, now)
                if fetched.topics is not None:
                    violations += self.quotas.record_topic_bytes(principal, FETCHED, fetched.topics, now)
                    if self.observer.wants_topics:
                        self.observer.topic_bytes(principal, "fetch", fetched.topics)
            if reply.mutations:
                self._mutations(reply.mutations, now)   # settles the bucket: the throttle was decided
            if flight.plan.watching:
                self._answered(flight, reply, now)
        plan = flight.plan
        if not plan.exempt:
            if plan.decided_on_response:
                violations += self.quotas.record_request(principal, flight.progress.handler_seconds, now)
            elif seconds:
                self.quotas.add_handler_time(principal, seconds, now)
        self.observer.handler_time(principal, flight.progress.handler_seconds)
        return violations

    def refund(self, flight: Flight, reply: Reply, now: float) -> None:
        """Take a withheld response's charge back: a throttled Fetch answered empty gave the client
        none of it (Kafka's unrecordQuotaSensor). The metrics keep what crossed kqp."""
        fetched = reply.fetched
        if fetched is not None:
            self.quotas.unrecord_fetch(flight.principal, fetched.quota_bytes, fetched.records, fetched.batches, now)
            if fetched.topics is not None:
                self.quotas.record_topic_bytes(flight.principal, FETCHED, fetched.topics, now, refund=True)

    def _mutations(self, charges: Iterable[MutationCharge], now: float) -> list[Violation]:
        violations: list[Violation] = []
        for principal, partitions, rule in charges:
            if rule is PERMISSIVE or rule is SETTLE:
                found = self.quotas.record_mutations(principal, partitions, now)
                if rule is PERMISSIVE:
                    violations += found
                continue
            if partitions:
                self.quotas.add_mutations(principal, partitions, now)
            if rule is REJECTED:
                violations += self.quotas.mutation_rejection(principal, now)
        return violations

    # -- the adaptive pools' feeds -------------------------------------------------------------
    def _answered(self, flight: Flight, reply: Reply, now: float) -> None:
        watching, signals = flight.plan.watching, reply.signals or Signals(None, 0)
        usage: Usage | None = flight.plan.produced if reply.fetched is None else reply.fetched
        units = (0.0, 0.0, 0.0, 1.0) if usage is None else (usage.quota_bytes, usage.records, usage.batches, 1.0)
        node = -1 if flight.node is None else flight.node   # the bootstrap listener's broker is not known
        for pool in watching:
            pool.answered(flight)
            pool.observe(now, node, signals.latency, units, signals.throttle_ms)
            if signals.timeouts:
                pool.timeouts(signals.timeouts)

    def unanswered(self, in_flight: Iterable[Flight], upstream_lost: bool) -> None:
        """The connection closed with these requests unanswered: the adaptive pools watching them stop
        waiting for them, and each hears of one disconnect if the upstream went away."""
        watching: dict[AdaptivePool, None] = {}
        for flight in in_flight:
            for pool in flight.plan.watching:
                pool.answered(flight)
                watching[pool] = None
        if upstream_lost:
            for pool in watching:
                pool.disconnect()
