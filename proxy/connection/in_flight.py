"""The in-flight record of one request: what kqp needs when its response comes back.

Kafka answers a connection's requests in order, so a connection keeps these in a FIFO
(Kroxylicious' correlation manager). Only requests that have a response are recorded (an acks=0
Produce has none); requests kqp answers itself wait their turn in the same FIFO, carrying their
answer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from kqp.protocol.errors import ProtocolError
from kqp.proxy.policies.mutation_gate import Rewrite
from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal

log = logging.getLogger("kqp.connection")

@dataclass(slots=True)
class InFlight:
    """A request kqp has forwarded (or will answer itself) and whose response is still owed."""

    correlation_id: int
    api_key: int
    api_version: int
    principal: Principal
    sent_at: float
    handler_seconds: float
    violations: list[Violation] = field(default_factory=list)
    local_response: bytes | None = None    # kqp's own answer, sent when its turn comes
    rewrite: Rewrite | None = None         # applied to the upstream's response (KIP-599 merge, topic cache)
    exempt: bool = False                   # not charged to request quotas (Kafka's exemptions)
    fetched: tuple[int, int, int] | None = None   # Fetch response bytes, records, batches charged
    close_after: str | None = None         # close the connection once this answer is out (a failed login)


def unawaited(in_flight: Iterable[InFlight], correlation_id: int, peer: str) -> None:
    """A response that does not answer the oldest request in flight. One that answers a later
    request is out of order, which Kafka never does (ProtocolError); one that answers nothing kqp
    forwarded (librdkafka's mock cluster answers acks=0 Produce) is to be dropped: nobody awaits it."""
    entries = list(in_flight)
    if any(entry.correlation_id == correlation_id for entry in entries):
        raise ProtocolError(f"upstream answered {correlation_id} where {entries[0].correlation_id} was due")
    log.debug("client %s: dropping an upstream response to %d, which no request awaits", peer, correlation_id)
