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

Issue 22 (per-broker upstream latency): the core times forward -> response for every request
(`InFlight.sent_at`); a Fetch waits up to its max_wait_ms upstream by design, so this request side
is where max_wait_ms would be read onto the record, to be taken off that sample.
"""

from __future__ import annotations

from kqp.protocol.addresses import may_carry_addresses
from kqp.protocol.apis import ApiKey
from kqp.protocol.fetch import cap_fetch_max_bytes, empty_fetch_response, fetch_response_counts_parts
from kqp.protocol.parts import joined, with_body
from kqp.protocol.records import RecordCounts

from ..authentication import Authentication
from ..charging import Charging
from ..events import Parts
from ..exchange import Handler, InFlight, Request, Usage
from ..settings import CoreSettings

__all__ = ["FetchHandler"]

FETCH = ApiKey.Fetch


class FetchHandler(Handler):
    def __init__(self, charging: Charging) -> None:
        self.charging = charging

    def on_request(self, req: Request) -> Parts:
        hdr, entry = req.hdr, req.entry
        principal = entry.principal
        if may_carry_addresses(FETCH, hdr.api_version) and self.charging.fetch_needs_counts(principal):
            entry.counts = RecordCounts()   # the core's address walk (v16+) fills it on the way
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
            entry.fetched = Usage(size, charged)
            return frame
        counts = entry.counts
        if counts is None:   # not counted on the address walk (before v16, or not wanted then)
            counts = fetch_response_counts_parts(entry.api_version, frame, body_offset)
        entry.fetched = Usage(size, charged, counts.records, counts.batches)
        return frame

    def on_throttled(self, entry: InFlight, frame: Parts, body_offset: int, throttle_ms: int, now: float,
                     settings: CoreSettings) -> Parts:
        if settings.fetch_throttle != "empty" or entry.fetched is None:
            return frame
        # As the broker does: the data is not delivered, so it is not charged either.
        self.charging.refund_response(entry, now)
        return (empty_fetch_response(entry.api_version, frame, body_offset, throttle_ms),)
