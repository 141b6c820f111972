"""Produce: the bytes and records a request carries, charged when it is read; acks=0 expects nothing back.

Kafka charges a Produce request's bytes to the producer quotas as the request (the usage), so the
charge, and any throttle it earns, is known before the request is forwarded (the core mutes at once
when it is over). The records are read only when a record or batch quota (or the metrics) wants
them, across the slices the frame arrived in. An acks=0 request has no response: exempt from request
quotas, its byte-rate throttle is a mute without an answer. For a principal a topic pool takes, the
records bytes per topic go on its `Usage` (a topic id unknown to the cache is looked up first); a
member of an adaptive pool is watched, and its response side reads the answer's signals. Everyone
else costs one flag test (`Pools.reads`).
"""

from __future__ import annotations

from kqp.protocol.frames import SIZE_PREFIX
from kqp.protocol.produce import produce_acks, produce_request_counts_parts
from kqp.protocol.topic_bytes import produce_request_topics, produce_response_signals
from kqp.proxy.policies.topic_metadata import TopicMetadata
from kqp.quotas.model import ChargeKind, QuotaType

from ..charging import Charging
from ..events import Parts
from ..plans import LOOK_UP, Deferred, Flight, Handler, Plan, Replier, Reply, Request, Signals, Usage
from .pooled import topic_sizes

__all__ = ["ProduceHandler"]

BYTES = QuotaType.PRODUCER_BYTE_RATE
PRODUCE = ChargeKind.PRODUCE   # a module name: read on every Produce of a pooled principal


class WatchedProduce(Replier):
    """The response side of a Produce an adaptive pool watches: latency, the upstream's throttle, timeouts."""

    def reply(self, flight: Flight, frame: Parts, body_offset: int, now: float) -> Reply:
        signals = produce_response_signals(flight.api_version, frame, body_offset)
        return Reply(frame, signals=Signals(now - flight.read_at, signals.throttle_ms, signals.timeouts))


WATCHED = WatchedProduce()


class ProduceHandler(Handler):
    def __init__(self, charging: Charging, topics: TopicMetadata | None = None) -> None:
        self.charging = charging
        self.pools = charging.pools
        self.topics = TopicMetadata() if topics is None else topics   # ids -> names (Produce v13)

    def plan(self, req: Request) -> Plan | Deferred:
        hdr, frame, size, principal = req.hdr, req.frame, req.size, req.principal
        if self.charging.produce_needs_counts(principal):
            counts = produce_request_counts_parts(hdr.api_version, frame, hdr.body_offset)
            usage = Usage(size, size - SIZE_PREFIX, counts.records, counts.batches)
        else:
            usage = Usage(size, size - SIZE_PREFIX)
        acks = produce_acks(hdr.api_version, req.head[hdr.body_offset:])
        pools = self.pools
        if pools.reads[PRODUCE] and pools.topic_types and pools.wants_topics(principal, BYTES):
            sizes, unknown = topic_sizes(produce_request_topics(hdr.api_version, frame, hdr.body_offset),
                                         self.topics)
            if unknown and not req.looked_up:
                return LOOK_UP
            usage = usage._replace(topics=tuple(sizes))
        elif self.charging.observer.wants_topics:   # kqp_topic_bytes_total, for everyone
            sizes, _ = topic_sizes(produce_request_topics(hdr.api_version, frame, hdr.body_offset), self.topics,
                                   by_id=True)
            usage = usage._replace(topics=tuple(sizes))
        if pools.reads[PRODUCE] and acks != 0 and (watching := pools.watching(principal, PRODUCE)):
            return Plan(produced=usage, reply=WATCHED, watching=watching)
        if acks == 0:
            return Plan(produced=usage, expects_response=False, exempt=True)
        return Plan(produced=usage)
