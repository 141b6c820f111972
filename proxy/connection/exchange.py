"""One request and its response, as the core's dispatcher and the API handlers share them.

The core (`core.py`) reads a request's header, starts its `InFlight` record and hands a `Request`
to the `Handler` the registry (`handlers/registry.py`) keeps for the API key, in the manner of
Kroxylicious' filters. The handler's request side answers what goes upstream: the frame as it came,
a rewritten frame, or nothing (kqp answers itself: `InFlight.local_response`), or `LOOK_UP` (look
the topics up first, then hand it the same request again). It writes on the record what the core
must know later, and what the request used (`Usage`), which the core charges (`charging.py`); an answer
that needs the runtime first is a `PendingCommit` there (the core emits `CommitQuotas`). When
the response is back the core hands it to the same handler's response side, after the one step
every response shares (broker addresses rewritten to kqp's listeners); and when the request's
throttle is known, `on_throttled` may change what goes out.

Handlers are process-wide: built once where the server is assembled, with the policies they
consult (`kqp.proxy.policies`); what they need of a connection (who it is, its SASL state) comes
with each call, as `Authentication`.

Kafka answers a connection's requests in order, so a connection keeps its `InFlight` records in a
FIFO (Kroxylicious' correlation manager); kqp's own answers wait their turn in it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from kqp.protocol.errors import ProtocolError
from kqp.protocol.headers import RequestHeader
from kqp.protocol.records import RecordCounts
from kqp.protocol.topic_bytes import TopicBytes
from kqp.proxy.policies.mutation_gate import Rewrite
from kqp.proxy.policies.quota_admin import PendingCommit
from kqp.quotas.adaptive_pools import AdaptivePool
from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal

from .authentication import Authentication
from .events import Parts
from .settings import CoreSettings

__all__ = ["LOOK_UP", "Handler", "InFlight", "Refused", "Request", "TopicUsage", "Usage", "unawaited"]

log = logging.getLogger("kqp.connection")


class Hold(enum.Enum):
    """A request side's answer that the request must wait: the core holds it, reading nothing more."""

    LOOK_UP = "look the topics up first, then plan the request again"


LOOK_UP = Hold.LOOK_UP


class Refused(Exception):
    """The request closes the connection unanswered, as Kafka does (``reason`` is the metrics label)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(slots=True)   # not frozen: a frozen dataclass's __init__ costs 4x, once per Produce and Fetch
class Usage:
    """What a Produce request or a Fetch response moved, as its handler measured it; `Charging` turns
    it into the charges of the quotas that count it."""

    frame_bytes: int    # the whole frame, size prefix included: what the metrics count
    quota_bytes: int    # as Kafka's byte-rate quota counts it
    records: int = 0    # counted only when a record or batch quota, or the metrics, want them
    batches: int = 0
    #: (topic, records bytes) per topic, read only for a principal a topic pool takes (`TopicUsage`).
    topics: ClassVar[list[tuple[str, int]] | None] = None


class TopicUsage(Usage):
    """A `Usage` whose bytes per topic were read (issue 21); `reading` is the walk that found them."""

    __slots__ = ("reading", "topics")

    def __init__(self, usage: Usage, topics: list[tuple[str, int]], reading: TopicBytes) -> None:
        Usage.__init__(self, usage.frame_bytes, usage.quota_bytes, usage.records, usage.batches)
        self.topics, self.reading = topics, reading


@dataclass(slots=True, eq=False)
class InFlight:
    """A request kqp has read, from its header to its response: what the core and its handler keep.
    Compared and hashed by identity: adaptive pools key their unanswered Produce requests by it."""

    correlation_id: int
    api_key: int
    api_version: int
    principal: Principal
    sent_at: float
    handler: Handler                       # the API's handler; its response side runs on the response
    handler_seconds: float = 0.0
    violations: list[Violation] = field(default_factory=list)   # quotas exceeded when the request was read
    local_response: bytes | PendingCommit | None = None   # kqp's own answer, sent when its turn comes
                                           # (a PendingCommit: once the state file is committed)
    rewrite: Rewrite | None = None         # applied to the upstream's response (KIP-599 merge, topic cache)
    exempt: bool = False                   # not charged to request quotas (Kafka's exemptions)
    expects_response: bool = True          # False: none will come (acks=0 Produce)
    produced: Usage | None = None          # what the request carried (Produce), charged when it is read
    fetched: Usage | None = None           # what the response carried (Fetch), charged when it is back
    counts: RecordCounts | None = None     # the response's records and batches, when they are wanted
    close_after: str | None = None         # close the connection once this answer is out (a failed login)


class Request:
    """One request as a handler's request side reads it: `frame` is the slices it arrived in (`size`
    bytes in all, size prefix included), `head` a contiguous start of it holding at least the header
    (and Produce's acks); `node` the upstream broker it goes to (None: the bootstrap's)."""

    __slots__ = ("auth", "entry", "frame", "hdr", "head", "looked_up", "node", "size")

    def __init__(self, hdr: RequestHeader, head: memoryview, frame: Parts, size: int, entry: InFlight,
                 auth: Authentication, looked_up: bool, node: int | None = None) -> None:
        self.hdr, self.head, self.frame, self.size = hdr, head, frame, size
        self.entry, self.auth, self.looked_up, self.node = entry, auth, looked_up, node


class Handler:
    """One API family's request side and response side. This base is the default handler: the frames
    go through on their header alone, both ways."""

    #: Whether this handler has a response side of its own (set for each subclass): the core skips
    #: the call for the APIs that have none, most responses on the fast path.
    reads_responses = False
    #: The adaptive pools this handler reports its responses to (issue 22: a member's Produce or
    #: Fetch gets a watching handler of its own, handlers/watched.py); they hear of an upstream lost.
    watching: tuple[AdaptivePool, ...] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.reads_responses = cls.on_response is not Handler.on_response

    def on_request(self, req: Request) -> Parts | Hold | None:
        """What goes upstream (None: nothing; `LOOK_UP`: wait for a topic lookup)."""
        return req.frame

    def on_response(self, entry: InFlight, frame: Parts, body_offset: int, now: float,
                    auth: Authentication) -> Parts:
        """The response to deliver, as parts (broker addresses already kqp's)."""
        return frame

    def on_throttled(self, entry: InFlight, frame: Parts, body_offset: int, throttle_ms: int, now: float,
                     settings: CoreSettings) -> Parts:
        """The response to deliver under a throttle, before the core writes `throttle_time_ms` into it."""
        return frame


def unawaited(in_flight: Iterable[InFlight], correlation_id: int, peer: str) -> None:
    """A response that does not answer the oldest request in flight. One that answers a later
    request is out of order, which Kafka never does (ProtocolError); one that answers nothing kqp
    forwarded (librdkafka's mock cluster answers acks=0 Produce) is to be dropped: nobody awaits it."""
    entries = list(in_flight)
    if any(entry.correlation_id == correlation_id for entry in entries):
        raise ProtocolError(f"upstream answered {correlation_id} where {entries[0].correlation_id} was due")
    log.debug("client %s: dropping an upstream response to %d, which no request awaits", peer, correlation_id)
