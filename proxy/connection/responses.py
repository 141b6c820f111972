"""What an upstream response becomes before the client sees it, and what it costs.

`settle_response` applies the request's rewrite (KIP-599's merge, the topic cache), rewrites broker
addresses to kqp's listeners, charges the Fetch bytes, and returns the frame with the violations it
earned. A response travels as the slices it arrived in (`Parts`): records are counted and
NodeEndpoints found across them, never from a joined copy. `throttled_parts` is KIP-219's answer
for any version: the frame with `throttle_time_ms` raised where the version has the field (or, for
`fetch_throttle: empty`, the broker's empty throttled Fetch), as views of the frame around a fresh
4-byte field, never a copy of the records.
"""

from __future__ import annotations

from kqp.protocol.addresses import may_carry_addresses, rewrite_addresses_parts
from kqp.protocol.apis import ApiKey
from kqp.protocol.errors import ProtocolError
from kqp.protocol.fetch import empty_fetch_response
from kqp.protocol.parts import joined
from kqp.protocol.records import BodyError, RecordCounts
from kqp.protocol.throttle import throttle_patch_parts
from kqp.quotas.manager import Violation
from kqp.quotas.model import QuotaType

from .events import Parts
from .in_flight import InFlight
from .parts import CoreParts

FETCH = ApiKey.Fetch
MUTATION = QuotaType.CONTROLLER_MUTATION_RATE


def settle_response(parts: CoreParts, entry: InFlight, frame: Parts, body_offset: int,
                    now: float) -> tuple[Parts, list[Violation]]:
    """The response to deliver, as parts, and the violations of every quota the request and its
    response crossed. `frame` is the response as the slices it arrived in: a Fetch response's records
    are counted and its NodeEndpoints checked across them, never joined. Handler time is charged by
    the caller, once the whole request's time is known."""
    metering = parts.metering
    if entry.rewrite is not None:
        # The KIP-599 gate reads (and may rewrite) small admin answers whole.
        frame = (entry.rewrite(joined(frame), body_offset, now),)
    counts: RecordCounts | None = None
    api, version = entry.api_key, entry.api_version
    if may_carry_addresses(api, version):
        # Fetch v16+: the walk to the NodeEndpoints tag passes every batch; count them on the way.
        if api == FETCH and metering.fetch_needs_counts(entry.principal):
            counts = RecordCounts()
        rewritten, seen = rewrite_addresses_parts(api, version, frame, body_offset, parts.map_address, counts)
        parts.learn_brokers(seen)
        if rewritten is not None:
            frame = rewritten
    violations = entry.violations
    if api == FETCH:
        violations = violations + metering.charge_fetch(entry, frame, body_offset, now, counts)
    return frame, violations


def net_of_elapsed(violations: list[Violation], elapsed: float) -> list[Violation]:
    """A mutation throttle counts from when it was recorded, not from when the response leaves:
    Kafka's ControllerMutationQuota deducts the time since recording (the upstream's latency)."""
    if elapsed <= 0 or not any(v.quota_type == MUTATION for v in violations):
        return violations
    return [Violation(v.quota_type, max(0.0, v.throttle_seconds - elapsed), v.key) if v.quota_type == MUTATION
            else v for v in violations]


def throttled_parts(parts: CoreParts, entry: InFlight, frame: Parts, body_offset: int, throttle_ms: int,
                    now: float) -> Parts:
    """The response as it goes out with a throttle (KIP-219)."""
    if entry.api_key == FETCH and parts.settings.fetch_throttle == "empty" and entry.fetched is not None:
        # As the broker does: the data is not delivered, so it is not charged either.
        parts.metering.refund_fetch(entry, now)
        frame = (empty_fetch_response(entry.api_version, frame, body_offset, throttle_ms),)
    try:
        patched = throttle_patch_parts(entry.api_key, entry.api_version, frame, body_offset, throttle_ms)
    except (ProtocolError, BodyError):
        # The field is the client's hint only; the mute protects the upstream either way. A response
        # kqp cannot walk goes out as the upstream sent it, and is counted.
        parts.metering.observer.upstream_anomaly("unreadable")
        patched = None
    return patched if patched is not None else frame
