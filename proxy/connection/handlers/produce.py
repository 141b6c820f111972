"""Produce: the bytes and records a request carries, charged when it is read; acks=0 expects nothing back.

Kafka charges a Produce request's bytes to the producer quotas when it reads it (the request is
the usage), so the charge, and any throttle it earns, is known before the request is forwarded;
the core mutes at once when it is over (a broker reads one request at a time). The records are read
only when a record or batch quota (or the metrics) wants them, across the slices the frame arrived
in. An acks=0 request has no response: Kafka exempts it from request quotas, and its byte-rate
throttle is a mute without an answer.

Pools (pooled.py): for a principal a topic pool takes, the request's records bytes per topic go on
its `Usage`, charged with it; a member of an adaptive pool gets a watching handler, whose response
side reports the answer's latency, the upstream's throttle and timed-out partitions to the pool.
Everyone else costs one flag test (`PoolBook.reads`).
"""

from __future__ import annotations

from kqp.protocol.produce import produce_acks, produce_request_counts_parts
from kqp.protocol.topic_bytes import produce_request_topics, produce_response_signals
from kqp.proxy.policies.topic_metadata import TopicMetadata
from kqp.quotas.adaptive_pools import AdaptivePool
from kqp.quotas.model import QuotaType
from kqp.quotas.pools import PRODUCE

from ..authentication import Authentication
from ..charging import Charging
from ..events import Parts
from ..exchange import LOOK_UP, Handler, Hold, InFlight, Request, TopicUsage, Usage
from .pooled import Watchers, report, topic_sizes

__all__ = ["ProduceHandler", "WatchedProduce"]

SIZE_PREFIX = 4
BYTES = QuotaType.PRODUCER_BYTE_RATE


class ProduceHandler(Handler):
    def __init__(self, charging: Charging, topics: TopicMetadata | None = None) -> None:
        self.charging = charging
        self.pools = charging.pools
        self.topics = TopicMetadata() if topics is None else topics   # ids -> names (Produce v13)
        self.watchers = Watchers(WatchedProduce)

    def on_request(self, req: Request) -> Parts | Hold:
        hdr, entry, frame, size = req.hdr, req.entry, req.frame, req.size
        if self.charging.produce_needs_counts(entry.principal):
            counts = produce_request_counts_parts(hdr.api_version, frame, hdr.body_offset)
            usage = Usage(size, size - SIZE_PREFIX, counts.records, counts.batches)
        else:
            usage = Usage(size, size - SIZE_PREFIX)
        acks = produce_acks(hdr.api_version, req.head[hdr.body_offset:])
        if self.pools.reads[PRODUCE]:
            pooled = self._pooled(req, usage, acks)
            if pooled is None:
                return LOOK_UP
            usage = pooled
        entry.produced = usage
        if acks == 0:
            entry.expects_response, entry.exempt = False, True
        return frame

    def _pooled(self, req: Request, usage: Usage, acks: int) -> Usage | None:
        """The usage with its bytes per topic where a topic pool wants them (None: look the topics
        up first), and the request watched where an adaptive pool does."""
        entry, pools = req.entry, self.pools
        principal = entry.principal
        if pools.topic_types and pools.wants_topics(principal, BYTES):
            reading = produce_request_topics(req.hdr.api_version, req.frame, req.hdr.body_offset)
            sizes, unknown = topic_sizes(reading, self.topics)
            if unknown and not req.looked_up:
                return None
            usage = TopicUsage(usage, sizes, reading)
        if acks != 0 and (watching := pools.watching(principal, PRODUCE)):
            entry.handler = self.watchers.get(watching, req.node)
            for pool in watching:
                pool.sent(entry, entry.sent_at)
        return usage


class WatchedProduce(Handler):
    """The response side of a Produce that adaptive pools watch (its request side was ProduceHandler's)."""

    def __init__(self, watching: tuple[AdaptivePool, ...], node: int) -> None:
        self.watching, self.node = watching, node

    def on_response(self, entry: InFlight, frame: Parts, body_offset: int, now: float,
                    auth: Authentication) -> Parts:
        signals = produce_response_signals(entry.api_version, frame, body_offset)
        for pool in self.watching:
            pool.answered(entry)
        report(self.watching, now, self.node, now - entry.sent_at, entry.produced, signals.throttle_ms,
               signals.timeouts)
        return frame
