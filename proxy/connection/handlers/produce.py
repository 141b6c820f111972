"""Produce: the bytes and records a request carries, charged when it is read; acks=0 expects nothing back.

Kafka charges a Produce request's bytes to the producer quotas when it reads it (the request is
the usage), so the charge, and any throttle it earns, is known before the request is forwarded;
the core mutes at once when it is over (a broker reads one request at a time). The records are read
only when a record or batch quota (or the metrics) wants them, across the slices the frame arrived
in. An acks=0 request has no response: Kafka exempts it from request quotas, and its byte-rate
throttle is a mute without an answer.

Issue 21 (per-topic accounting) lands here: when a topic pool selects topics, this side reads the
partitions' topics and bytes into the `Usage`, and `Charging.charge_request` charges the pools.
"""

from __future__ import annotations

from kqp.protocol.produce import produce_acks, produce_request_counts_parts

from ..charging import Charging
from ..events import Parts
from ..exchange import Handler, Request, Usage

__all__ = ["ProduceHandler"]

SIZE_PREFIX = 4


class ProduceHandler(Handler):
    def __init__(self, charging: Charging) -> None:
        self.charging = charging

    def on_request(self, req: Request) -> Parts:
        hdr, entry, frame, size = req.hdr, req.entry, req.frame, req.size
        if self.charging.produce_needs_counts(entry.principal):
            counts = produce_request_counts_parts(hdr.api_version, frame, hdr.body_offset)
            entry.produced = Usage(size, size - SIZE_PREFIX, counts.records, counts.batches)
        else:
            entry.produced = Usage(size, size - SIZE_PREFIX)
        if produce_acks(hdr.api_version, req.head[hdr.body_offset:]) == 0:
            entry.expects_response, entry.exempt = False, True
        return frame
