"""What a request or response costs its entity: the few body reads quotas need, and the charges.

Record counts are read only when a record or batch quota (or the metrics observer) wants them, so
byte-rate-only deployments never walk a Produce request's partitions, and they are read across the
slices a frame arrived in, never from a joined copy. Everything here is charged with the loop time
the core was handed (`now`): no clock is read.

Sizes are charged as Kafka counts them: a Produce request is its header and body without the
4-byte size prefix (RequestChannel.Request.sizeInBytes), a Fetch response its body plus 4
(FetchResponse.sizeOf); the metrics count whole frames, size prefix included.
"""

from __future__ import annotations

from kqp.protocol.fetch import cap_fetch_max_bytes, fetch_response_counts_parts
from kqp.protocol.parts import with_body
from kqp.protocol.produce import produce_request_counts_parts
from kqp.protocol.records import RecordCounts
from kqp.quotas.manager import QuotaManager, Violation
from kqp.quotas.model import Principal, QuotaType

from .events import Parts
from .exchange import InFlight
from .hooks import ProxyObserver

SIZE_PREFIX = 4
MUTATION = QuotaType.CONTROLLER_MUTATION_RATE


class Metering:
    """The quota manager and the observer, charged together for each request and response."""

    __slots__ = ("observer", "quotas")

    def __init__(self, quotas: QuotaManager, observer: ProxyObserver) -> None:
        self.quotas = quotas
        self.observer = observer

    def produce_needs_counts(self, principal: Principal) -> bool:
        return self.observer.wants_records or self.quotas.counts_produce_records(principal)

    def fetch_needs_counts(self, principal: Principal) -> bool:
        return self.observer.wants_records or self.quotas.counts_fetch_records(principal)

    def charge_produce(self, principal: Principal, size: int, parts: Parts, body_offset: int, version: int,
                       now: float) -> list[Violation]:
        """Charge a Produce request, `size` bytes on the wire as `parts`; its batches are read only when
        counts are wanted."""
        records = batches = 0
        if self.produce_needs_counts(principal):
            counts = produce_request_counts_parts(version, parts, body_offset)
            records, batches = counts.records, counts.batches
        self.observer.produced(principal, size, records)
        return self.quotas.record_produce(principal, size - SIZE_PREFIX, records, batches, now)

    def capped_fetch(self, principal: Principal, frame: memoryview, body_offset: int, version: int) -> memoryview:
        """Kafka's getMaxValueInQuotaWindow: a Fetch may not ask for more than the quota's whole span."""
        cap = self.quotas.fetch_max_bytes_cap(principal)
        if cap is None:
            return frame
        body = cap_fetch_max_bytes(version, frame[body_offset:], cap)
        return frame if body is None else memoryview(with_body(frame, body_offset, body))

    def charge_fetch(self, entry: InFlight, parts: Parts, body_offset: int, now: float,
                     counts: RecordCounts | None = None) -> list[Violation]:
        """Charge a Fetch response, the frame as the `parts` it arrived in; `counts` are its records
        when the address walk already counted them."""
        principal = entry.principal
        records = batches = 0
        if self.fetch_needs_counts(principal):
            if counts is None:
                counts = fetch_response_counts_parts(entry.api_version, parts, body_offset)
            records, batches = counts.records, counts.batches
        size = sum(map(len, parts))
        self.observer.fetched(principal, size, records)
        charged = size - body_offset + 4
        entry.fetched = (charged, records, batches)
        return self.quotas.record_fetch(principal, charged, records, batches, now)

    def refund_fetch(self, entry: InFlight, now: float) -> None:
        """Take a throttled Fetch's charge back: answered empty, the client got none of it."""
        if entry.fetched is not None:
            self.quotas.unrecord_fetch(entry.principal, *entry.fetched, now)


def net_of_elapsed(violations: list[Violation], elapsed: float) -> list[Violation]:
    """A mutation throttle counts from when it was recorded, not from when the response leaves:
    Kafka's ControllerMutationQuota deducts the time since recording (the upstream's latency)."""
    if elapsed <= 0 or not any(v.quota_type == MUTATION for v in violations):
        return violations
    return [Violation(v.quota_type, max(0.0, v.throttle_seconds - elapsed), v.key) if v.quota_type == MUTATION
            else v for v in violations]
