"""The in-flight record of one request: what kqp needs when its response comes back.

Kafka answers a connection's requests in order, so a session keeps these in a FIFO (Kroxylicious'
correlation manager); requests kqp answers itself wait their turn in the same FIFO.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal

from .mutation_gate import Rewrite


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
    fetched: tuple[int, int, int] | None = None   # Fetch response bytes, records, batches charged
    rewrite: Rewrite | None = None               # applied to the response before delivery (KIP-599 merge)
