"""Fetch: max_bytes capped to the quota, the response's bytes and records, and `fetch_throttle`.

* Request side: Kafka's getMaxValueInQuotaWindow: a Fetch may not ask for more than its consumer
  quota's whole span, so no response is bound to be throttled whatever came before it.
* Response side: the response's bytes (and, when a record or batch quota or the metrics want them,
  its records) are its `Usage`, charged by the core with the response; for v16+ the core's address
  step has already walked every batch on its way to the NodeEndpoints tag and counted them into
  `InFlight.counts`, so the response is walked once.
* Throttled: `fetch_throttle: empty` answers as the broker does since KIP-219, with no records,
  and takes the charge back (Kafka's unrecordQuotaSensor); `deliver` (the default) delivers what
  kqp has already paid the upstream for.

Pools (pooled.py): for a principal a consumer topic pool takes, the response's records bytes per
topic go on its `Usage` (and are refunded with it when answered empty); a member of an adaptive pool
gets a watching handler (`WatchedFetch`), whose response side reports the answer to the pool, as
latency only when the broker had more to give than it returned: a Fetch that may have waited on its
max_wait_ms measured the producers, not the broker. Everyone else costs one flag test.
"""

from __future__ import annotations

from kqp.protocol.addresses import may_carry_addresses
from kqp.protocol.apis import ApiKey
from kqp.protocol.fetch import cap_fetch_max_bytes, empty_fetch_response, fetch_response_counts_parts
from kqp.protocol.parts import joined, with_body
from kqp.protocol.records import RecordCounts
from kqp.protocol.topic_bytes import fetch_response_topics
from kqp.proxy.policies.topic_metadata import TopicMetadata
from kqp.quotas.adaptive_pools import AdaptivePool
from kqp.quotas.model import QuotaType
from kqp.quotas.pools import FETCH as FETCHES
from kqp.quotas.upstream_signals import counts_as_latency

from ..authentication import Authentication
from ..charging import Charging
from ..events import Parts
from ..exchange import Handler, InFlight, Request, TopicUsage, Usage
from ..settings import CoreSettings
from .pooled import Watchers, report, topic_sizes

__all__ = ["FetchHandler", "WatchedFetch"]

FETCH = ApiKey.Fetch
BYTES = QuotaType.CONSUMER_BYTE_RATE


class FetchHandler(Handler):
    def __init__(self, charging: Charging, topics: TopicMetadata | None = None) -> None:
        self.charging = charging
        self.pools = charging.pools
        self.topics = TopicMetadata() if topics is None else topics   # ids -> names (Fetch v13+)
        self.watchers = Watchers(lambda watching, node: WatchedFetch(self, watching, node))

    def on_request(self, req: Request) -> Parts:
        hdr, entry = req.hdr, req.entry
        principal = entry.principal
        if may_carry_addresses(FETCH, hdr.api_version) and self.charging.fetch_needs_counts(principal):
            entry.counts = RecordCounts()   # the core's address walk (v16+) fills it on the way
        if self.pools.reads[FETCHES] and (watching := self.pools.watching(principal, FETCHES)):
            entry.handler = self.watchers.get(watching, req.node)
        cap = self.charging.fetch_cap(principal)
        if cap is None:
            return req.frame
        frame = joined(req.frame)
        body = cap_fetch_max_bytes(hdr.api_version, frame[hdr.body_offset:], cap)
        return (frame,) if body is None else (memoryview(with_body(frame, hdr.body_offset, body)),)

    def on_response(self, entry: InFlight, frame: Parts, body_offset: int, now: float,
                    auth: Authentication) -> Parts:
        size = sum(map(len, frame))
        charged = size - body_offset + 4
        if not self.charging.fetch_needs_counts(entry.principal):
            usage = Usage(size, charged)
        else:
            counts = entry.counts
            if counts is None:   # not counted on the address walk (before v16, or not wanted then)
                counts = fetch_response_counts_parts(entry.api_version, frame, body_offset)
            usage = Usage(size, charged, counts.records, counts.batches)
        pools = self.pools
        if pools.reads[FETCHES] and pools.topic_types and pools.wants_topics(entry.principal, BYTES):
            reading = fetch_response_topics(entry.api_version, frame, body_offset)
            usage = TopicUsage(usage, topic_sizes(reading, self.topics)[0], reading)
        entry.fetched = usage
        return frame

    def on_throttled(self, entry: InFlight, frame: Parts, body_offset: int, throttle_ms: int, now: float,
                     settings: CoreSettings) -> Parts:
        if settings.fetch_throttle != "empty" or entry.fetched is None:
            return frame
        # As the broker does: the data is not delivered, so it is not charged either.
        self.charging.refund_response(entry, now)
        return (empty_fetch_response(entry.api_version, frame, body_offset, throttle_ms),)


class WatchedFetch(FetchHandler):
    """A Fetch that adaptive pools watch: FetchHandler's response side, then the report."""

    def __init__(self, base: FetchHandler, watching: tuple[AdaptivePool, ...], node: int) -> None:
        self.charging, self.pools, self.topics, self.watchers = base.charging, base.pools, base.topics, base.watchers
        self.watching, self.node = watching, node

    def on_response(self, entry: InFlight, frame: Parts, body_offset: int, now: float,
                    auth: Authentication) -> Parts:
        frame = super().on_response(entry, frame, body_offset, now, auth)
        fetched = entry.fetched
        reading = fetched.reading if isinstance(fetched, TopicUsage) else \
            fetch_response_topics(entry.api_version, frame, body_offset)
        latency = now - entry.sent_at if counts_as_latency(True, reading.records_bytes, reading.more) else None
        report(self.watching, now, self.node, latency, fetched, reading.throttle_ms)
        return frame
