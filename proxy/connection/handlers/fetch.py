"""Fetch: max_bytes capped to the quota, the response's bytes and records, and `fetch_throttle`.

Request side: Kafka's getMaxValueInQuotaWindow, a Fetch may not ask for more than its consumer
quota's whole span, so no response is bound to be throttled whatever came before it (a steady
quota's: nor more than its tokens and one window). Response side
(`FetchReply`): the response's bytes (and, when a record or batch quota or the metrics want them, its
records) are the reply's `Usage`; for v16+ the core's address walk has counted the records already
(`Plan.count_records`), so the response is walked once. Throttled, `fetch_throttle: empty` answers
as the broker does since KIP-219, without records (`withheld`: the core refunds the charge);
`deliver`, the default, delivers what kqp has already paid the upstream for. For a principal a
consumer topic pool takes, the bytes per topic go on the `Usage`; a watched Fetch (an adaptive
pool's member) is latency only when the broker had more to give than it returned, since a Fetch that
may have waited on its max_wait_ms measured the producers, not the broker.
"""

from __future__ import annotations

from kqp.protocol.addresses import may_carry_addresses
from kqp.protocol.apis import ApiKey
from kqp.protocol.fetch import cap_fetch_max_bytes, empty_fetch_response, fetch_response_counts_parts
from kqp.protocol.parts import joined, with_body
from kqp.protocol.topic_bytes import TopicBytes, fetch_response_topics
from kqp.proxy.policies.topic_metadata import TopicMetadata
from kqp.quotas.model import ChargeKind, QuotaType
from kqp.quotas.upstream_signals import counts_as_latency

from ..charging import Charging
from ..events import Parts
from ..plans import AS_IS, Flight, Forward, Handler, Plan, Replier, Reply, Request, Signals, Usage
from ..settings import CoreSettings
from .pooled import topic_sizes

__all__ = ["FetchHandler", "FetchReply"]

FETCH = ApiKey.Fetch
BYTES = QuotaType.CONSUMER_BYTE_RATE
FETCHES = ChargeKind.FETCH   # a module name: read on every Fetch


class FetchReply(Replier):
    """What a Fetch response carried (and, `watched`, what an adaptive pool hears of it)."""

    __slots__ = ("charging", "pools", "topics", "watched")

    def __init__(self, charging: Charging, topics: TopicMetadata, watched: bool) -> None:
        self.charging, self.pools, self.topics, self.watched = charging, charging.pools, topics, watched

    def reply(self, flight: Flight, frame: Parts, body_offset: int, now: float) -> Reply:
        size = sum(map(len, frame))
        charged = size - body_offset + 4   # Kafka's FetchResponse.sizeOf: the body and its size prefix
        if not self.charging.fetch_needs_counts(flight.principal):
            usage = Usage(size, charged)
        else:
            counts = flight.counts   # counted on the address walk (v16+), else counted now
            if counts is None:
                counts = fetch_response_counts_parts(flight.api_version, frame, body_offset)
            usage = Usage(size, charged, counts.records, counts.batches)
        reading: TopicBytes | None = None
        pools = self.pools
        if pools.reads[FETCHES] and pools.topic_types and pools.wants_topics(flight.principal, BYTES):
            reading = fetch_response_topics(flight.api_version, frame, body_offset)
            usage = usage._replace(topics=tuple(topic_sizes(reading, self.topics)[0]))
        elif self.charging.observer.wants_topics:   # kqp_topic_bytes_total, for everyone
            reading = fetch_response_topics(flight.api_version, frame, body_offset)
            usage = usage._replace(topics=tuple(topic_sizes(reading, self.topics, by_id=True)[0]))
        if not self.watched:
            return Reply(frame, fetched=usage)
        if reading is None:
            reading = fetch_response_topics(flight.api_version, frame, body_offset)
        latency = now - flight.sent_at if counts_as_latency(True, reading.records_bytes, reading.more) else None
        return Reply(frame, fetched=usage, signals=Signals(latency, reading.throttle_ms))

    def withheld(self, flight: Flight, frame: Parts, body_offset: int, throttle_ms: int,
                 settings: CoreSettings) -> Parts | None:
        if settings.fetch_throttle != "empty":
            return None
        # As the broker does: the data is not delivered (and the core refunds its charge).
        return (empty_fetch_response(flight.api_version, frame, body_offset, throttle_ms),)


class FetchHandler(Handler):
    def __init__(self, charging: Charging, topics: TopicMetadata | None = None) -> None:
        self.charging = charging
        self.pools = charging.pools
        topics = TopicMetadata() if topics is None else topics   # ids -> names (Fetch v13+)
        self.replies = (FetchReply(charging, topics, False), FetchReply(charging, topics, True))
        self._plain = (Plan(reply=self.replies[False]), Plan(reply=self.replies[False], decided_on_response=True))

    def plan(self, req: Request) -> Plan:
        hdr, principal = req.hdr, req.principal
        count = may_carry_addresses(FETCH, hdr.api_version) and self.charging.fetch_needs_counts(principal)
        watching = self.pools.watching(principal, FETCHES) if self.pools.reads[FETCHES] else ()
        charged = self.charging.charges_fetches(principal, False)   # then its throttle waits for its response
        cap = self.charging.fetch_cap(principal, req.now)
        if cap is None:
            if not count and not watching:
                return self._plain[charged]
            forward: Forward = AS_IS
        else:
            frame = joined(req.frame)
            body = cap_fetch_max_bytes(hdr.api_version, frame[hdr.body_offset:], cap)
            forward = (frame,) if body is None else (memoryview(with_body(frame, hdr.body_offset, body)),)
        return Plan(forward, reply=self.replies[bool(watching)], watching=watching, count_records=count,
                    decided_on_response=charged)
