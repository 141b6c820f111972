"""Produce: the bytes and records a request carries, charged when it is read; acks=0 expects nothing back.

Kafka charges a Produce request's bytes to the producer quotas when it reads it (the request is
the usage), so the charge, and any throttle it earns, is known before the request is forwarded;
the core mutes at once when it is over (a broker reads one request at a time). The records are read
only when a record or batch quota (or the metrics) wants them, across the slices the frame arrived
in. An acks=0 request has no response: Kafka exempts it from request quotas, and its byte-rate
throttle is a mute without an answer.
"""

from __future__ import annotations

from kqp.protocol.produce import produce_acks

from ..events import Parts
from ..exchange import Handler, Request
from ..metering import Metering

__all__ = ["ProduceHandler"]


class ProduceHandler(Handler):
    def __init__(self, metering: Metering) -> None:
        self.metering = metering

    def on_request(self, req: Request) -> Parts:
        hdr, entry, frame = req.hdr, req.entry, req.frame
        entry.violations = self.metering.charge_produce(entry.principal, sum(map(len, frame)), frame,
                                                        hdr.body_offset, hdr.api_version, entry.sent_at)
        if produce_acks(hdr.api_version, req.head[hdr.body_offset:]) == 0:
            entry.expects_response, entry.exempt = False, True
        return frame
