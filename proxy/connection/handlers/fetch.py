"""Fetch and ShareFetch: max_bytes capped to the quota, the response's bytes and records, `fetch_throttle`.

A share group's ShareFetch (KIP-932) is a consumer's fetch to Kafka's quotas: handled as a Fetch,
through its own readers (`FetchApi`). Request side: Kafka's getMaxValueInQuotaWindow, a Fetch may
not ask for more than its consumer quota's whole span, so no response is bound to be throttled
whatever came before it (a steady quota's: nor more than its tokens and one window). Response side
(`FetchReply`): the response's bytes (and, when a record or batch quota or the metrics want them,
its records) are the reply's `Usage`; for v16+ the core's address walk has counted the records
already (`Plan.count_records`), so the response is walked once. Throttled, `fetch_throttle: empty`
answers as the broker does since KIP-219, without records (`withheld`: the core refunds the charge);
`deliver`, the default, delivers what kqp has already paid the upstream for. For a principal a
consumer topic pool takes, the bytes per topic go on the `Usage`; a watched Fetch (an adaptive
pool's member) is latency only when the broker had more to give than it returned, since a Fetch that
may have waited on its max_wait_ms measured the producers, not the broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from kqp.protocol.addresses import may_carry_addresses
from kqp.protocol.apis import ApiKey
from kqp.protocol.fetch import (
    cap_fetch_max_bytes,
    cap_share_fetch_max_bytes,
    empty_fetch_response,
    empty_share_fetch_response,
    fetch_response_counts_parts,
    share_fetch_response_counts_parts,
)
from kqp.protocol.parts import joined, with_body
from kqp.protocol.records import RecordCounts
from kqp.protocol.topic_bytes import TopicBytes, fetch_response_topics, share_fetch_response_topics
from kqp.protocol.walker import Buffer
from kqp.proxy.policies.topic_metadata import TopicMetadata
from kqp.quotas.model import ChargeKind, QuotaType
from kqp.quotas.pools.upstream_signals import counts_as_latency

from ..charging import Charging
from ..events import Parts
from ..plans import AS_IS, Flight, Forward, Handler, Plan, Replier, Reply, Request, Signals, Usage
from ..settings import CoreSettings
from .pooled import topic_sizes

__all__ = ["FETCH", "SHARE_FETCH", "FetchApi", "FetchHandler", "FetchReply"]

BYTES = QuotaType.CONSUMER_BYTE_RATE
FETCHES = ChargeKind.FETCH   # a module name: read on every Fetch


class FetchApi(NamedTuple):
    """What kqp reads and writes of one fetch API (`kqp.protocol.fetch`, `kqp.protocol.topic_bytes`)."""

    api_key: int
    cap: Callable[[int, Buffer, int], bytes | None]            # (version, body, cap): max_bytes lowered
    counts: Callable[[int, Parts, int], RecordCounts]          # (version, frame, body offset)
    topics: Callable[[int, Parts, int], TopicBytes]
    empty: Callable[[int, Parts, int, int], bytes | None]      # the broker's throttled answer


FETCH = FetchApi(ApiKey.Fetch, cap_fetch_max_bytes, fetch_response_counts_parts, fetch_response_topics,
                 empty_fetch_response)
SHARE_FETCH = FetchApi(ApiKey.ShareFetch, cap_share_fetch_max_bytes, share_fetch_response_counts_parts,
                       share_fetch_response_topics, empty_share_fetch_response)


class FetchReply(Replier):
    """What a Fetch response carried (and, `watched`, what an adaptive pool hears of it)."""

    __slots__ = ("api", "charging", "pools", "topics", "watched")

    def __init__(self, charging: Charging, topics: TopicMetadata, watched: bool, api: FetchApi = FETCH) -> None:
        self.charging, self.pools, self.topics, self.watched, self.api = charging, charging.pools, topics, watched, api

    def reply(self, flight: Flight, frame: Parts, body_offset: int, now: float) -> Reply:
        size = sum(map(len, frame))
        charged = size - body_offset + 4   # Kafka's FetchResponse.sizeOf: the body and its size prefix
        if not self.charging.fetch_needs_counts(flight.principal):
            usage = Usage(size, charged)
        else:
            counts = flight.progress.counts   # counted on the address walk (v16+), else counted now
            if counts is None:
                counts = self.api.counts(flight.api_version, frame, body_offset)
            usage = Usage(size, charged, counts.records, counts.batches)
        reading: TopicBytes | None = None
        pools = self.pools
        if pools.reads[FETCHES] and pools.topic_types and pools.wants_topics(flight.principal, BYTES):
            reading = self.api.topics(flight.api_version, frame, body_offset)
            usage = usage._replace(topics=tuple(topic_sizes(reading, self.topics)[0]))
        elif self.charging.observer.wants_topics:   # kqp_topic_bytes_total, for everyone
            reading = self.api.topics(flight.api_version, frame, body_offset)
            usage = usage._replace(topics=tuple(topic_sizes(reading, self.topics, by_id=True)[0]))
        if not self.watched:
            return Reply(frame, fetched=usage)
        if reading is None:
            reading = self.api.topics(flight.api_version, frame, body_offset)
        latency = now - flight.read_at if counts_as_latency(True, reading.records_bytes, reading.more) else None
        return Reply(frame, fetched=usage, signals=Signals(latency, reading.throttle_ms))

    def withheld(self, flight: Flight, frame: Parts, body_offset: int, throttle_ms: int,
                 settings: CoreSettings) -> Parts | None:
        if settings.fetch_throttle != "empty":
            return None
        # As the broker does: the data is not delivered (and the core refunds its charge).
        empty = self.api.empty(flight.api_version, frame, body_offset, throttle_ms)
        return None if empty is None else (empty,)


class FetchHandler(Handler):
    def __init__(self, charging: Charging, topics: TopicMetadata | None = None, api: FetchApi = FETCH) -> None:
        self.charging = charging
        self.pools = charging.pools
        self.api = api
        topics = TopicMetadata() if topics is None else topics   # ids -> names (Fetch v13+, ShareFetch)
        self.replies = (FetchReply(charging, topics, False, api), FetchReply(charging, topics, True, api))
        self._plain = (Plan(reply=self.replies[False]), Plan(reply=self.replies[False], decided_on_response=True))

    def plan(self, req: Request) -> Plan:
        hdr, principal = req.hdr, req.principal
        count = may_carry_addresses(self.api.api_key, hdr.api_version) and self.charging.fetch_needs_counts(principal)
        charged = self.charging.charges_fetches(principal, False)   # then its throttle waits for its response
        watching = self.pools.watching(principal, FETCHES) if self.pools.reads[FETCHES] else ()
        cap = self.charging.fetch_cap(principal, req.now)
        if cap is None:
            if not count and not watching:
                return self._plain[charged]
            forward: Forward = AS_IS
        else:
            frame = joined(req.frame)
            body = self.api.cap(hdr.api_version, frame[hdr.body_offset:], cap)
            forward = (frame,) if body is None else (memoryview(with_body(frame, hdr.body_offset, body)),)
        return Plan(forward, reply=self.replies[bool(watching)], watching=watching, count_records=count,
                    decided_on_response=charged)
