"""Fetch: max_bytes capped to the quota, the response's bytes and records, and `fetch_throttle`.

* Request side: Kafka's getMaxValueInQuotaWindow: a Fetch may not ask for more than its consumer
  quota's whole span, so no response is bound to be throttled whatever came before it.
* Response side: the response's bytes (and, when a record or batch quota or the metrics want them,
  its records) are charged to the consumer quotas; for v16+ the core's address step has already
  walked every batch on its way to the NodeEndpoints tag and counted them into `InFlight.counts`.
* Throttled: `fetch_throttle: empty` answers as the broker does since KIP-219, with no records,
  and takes the charge back (Kafka's unrecordQuotaSensor); `deliver` (the default) delivers what
  kqp has already paid the upstream for.
"""

from __future__ import annotations

from kqp.protocol.addresses import may_carry_addresses
from kqp.protocol.apis import ApiKey
from kqp.protocol.fetch import empty_fetch_response
from kqp.protocol.parts import joined
from kqp.protocol.records import RecordCounts

from ..authentication import Authentication
from ..events import Parts
from ..exchange import Handler, InFlight, Request
from ..metering import Metering
from ..settings import CoreSettings

__all__ = ["FetchHandler"]

FETCH = ApiKey.Fetch


class FetchHandler(Handler):
    def __init__(self, metering: Metering) -> None:
        self.metering = metering

    def on_request(self, req: Request) -> Parts:
        hdr, entry = req.hdr, req.entry
        if self.metering.fetch_needs_counts(entry.principal):
            entry.counts = RecordCounts()   # filled by the address walk (v16+), else counted here
        return (self.metering.capped_fetch(entry.principal, joined(req.frame), hdr.body_offset, hdr.api_version),)

    def on_response(self, entry: InFlight, frame: Parts, body_offset: int, now: float,
                    auth: Authentication) -> Parts:
        walked = entry.counts if may_carry_addresses(FETCH, entry.api_version) else None
        entry.violations = entry.violations + self.metering.charge_fetch(entry, frame, body_offset, now, walked)
        return frame

    def on_throttled(self, entry: InFlight, frame: Parts, body_offset: int, throttle_ms: int, now: float,
                     settings: CoreSettings) -> Parts:
        if settings.fetch_throttle != "empty" or entry.fetched is None:
            return frame
        # As the broker does: the data is not delivered, so it is not charged either.
        self.metering.refund_fetch(entry, now)
        return (empty_fetch_response(entry.api_version, frame, body_offset, throttle_ms),)
