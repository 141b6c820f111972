"""What a request or response costs its entity: the few body reads quotas need, and the charges.

Record counts are read only when a record or batch quota (or a metrics observer) wants them, so
byte-rate-only deployments never walk a Produce request's partitions.
"""

from __future__ import annotations

import struct

from kqp.protocol.fetch import cap_fetch_max_bytes, fetch_response_counts_parts
from kqp.protocol.parts import Parts
from kqp.protocol.produce import produce_request_counts_parts
from kqp.protocol.records import RecordCounts
from kqp.proxy.runtime.context import ProxyContext
from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal

from .in_flight import InFlight

_SIZE = struct.Struct(">i")


def reframe(frame: memoryview, body_offset: int, body: bytes) -> bytes:
    """The frame with a new body: a new size prefix, the same header."""
    head = frame[4:body_offset]
    return b"".join((_SIZE.pack(len(head) + len(body)), head, body))


def produce_needs_counts(ctx: ProxyContext, principal: Principal) -> bool:
    """Whether a Produce request's batches must be walked: a record quota or the metrics want counts."""
    return ctx.observer.wants_records or ctx.quotas.counts_produce_records(principal)


def charge_produce(ctx: ProxyContext, principal: Principal, size: int, parts: Parts, body_offset: int,
                   version: int, now: float) -> list[Violation]:
    """Charge a Produce request of `size` bytes, the frame `parts` as it arrived; its body is read for
    record counts only when needed."""
    records = batches = 0
    if produce_needs_counts(ctx, principal):
        counts = produce_request_counts_parts(version, parts, body_offset)
        records, batches = counts.records, counts.batches
    ctx.observer.produced(principal, size, records)
    return ctx.quotas.record_produce(principal, size, records, batches, now)


def capped_fetch(ctx: ProxyContext, principal: Principal, frame: memoryview, body_offset: int,
                 version: int) -> memoryview:
    """Kafka's getMaxValueInQuotaWindow: a Fetch may not ask for more than the quota's whole span."""
    cap = ctx.quotas.fetch_max_bytes_cap(principal)
    if cap is None:
        return frame
    body = cap_fetch_max_bytes(version, frame[body_offset:], cap)
    return frame if body is None else memoryview(reframe(frame, body_offset, body))


def fetch_needs_counts(ctx: ProxyContext, principal: Principal) -> bool:
    """Whether a Fetch response's batches must be walked: a record quota or the metrics want counts."""
    return ctx.observer.wants_records or ctx.quotas.counts_fetch_records(principal)


def charge_fetch(ctx: ProxyContext, entry: InFlight, parts: Parts, body_offset: int, now: float,
                 counts: RecordCounts | None = None) -> list[Violation]:
    """Charge a Fetch response, the frame `parts` as it arrived; `counts` are its records when the
    address walk already counted them."""
    principal = entry.principal
    records = batches = 0
    if fetch_needs_counts(ctx, principal):
        if counts is None:
            counts = fetch_response_counts_parts(entry.api_version, parts, body_offset)
        records, batches = counts.records, counts.batches
    size = sum(map(len, parts))
    ctx.observer.fetched(principal, size, records)
    entry.fetched = (size, records, batches)
    return ctx.quotas.record_fetch(principal, size, records, batches, now)
