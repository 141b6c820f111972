"""The in-flight record of one request: what kqp needs when its response comes back.

Kafka answers a connection's requests in order, so a connection keeps these in a FIFO
(Kroxylicious' correlation manager). Only requests that have a response are recorded (an acks=0
Produce has none); requests kqp answers itself wait their turn in the same FIFO, carrying their
answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal

#: Applied to the upstream's whole response frame (with its body offset and the loop time) before
#: delivery; returns the whole frame to deliver (the same object when nothing changes).
Rewrite = Callable[[memoryview, int, float], "memoryview | bytes"]


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
