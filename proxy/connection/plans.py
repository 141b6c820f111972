"""A request's handling as a value: what a handler decides, and what the core keeps until the response.

A handler (`handlers/`) reads one `Request` and returns a `Plan`: what goes upstream (the frame as it
came, a rewritten one, or nothing), kqp's own answer, what the request used, whether a response is
owed and how it is read (`Replier`). The core carries the plan out, `Charging` charges what it names,
and the throttling room decides the request's throttle. Nothing here changes once made: the core
keeps the plan on the request's `Flight` with the few facts its response needs, beside the one
mutable part, its `Progress` (handler time, throttle, counts, kqp's answer). The response side
returns a `Reply` the same way. Kroxylicious' filter results and mitmproxy's commands are the models.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from kqp.protocol.errors import ProtocolError
from kqp.protocol.headers import RequestHeader
from kqp.protocol.records import RecordCounts
from kqp.proxy.policies.pending import Pending
from kqp.quotas.charges import MutationCharge
from kqp.quotas.model import Principal
from kqp.quotas.rates.throttle import Throttle

from .events import Parts
from .settings import CoreSettings

if TYPE_CHECKING:
    from kqp.quotas.pools.adaptive import AdaptivePool

__all__ = ["AS_IS", "LOOK_UP", "PASS", "Flight", "Forward", "Handler", "Plan", "Progress", "Replier", "Reply",
           "Request", "SaslFrame", "Signals", "Throttle", "Usage", "unawaited"]

log = logging.getLogger("kqp.connection")


class _AsIs(enum.Enum):
    AS_IS = "the request as it arrived"


#: `Plan.forward`: the request goes upstream as the slices it arrived in.
AS_IS = _AsIs.AS_IS
#: What goes upstream: the request as it came, the parts of another frame, or nothing.
Forward = Parts | _AsIs | None


class Deferred(enum.Enum):
    LOOK_UP = "look the topics up first, then plan the request again"


#: What a handler returns instead of a plan when the topic cache must be refreshed first.
LOOK_UP = Deferred.LOOK_UP


class Usage(NamedTuple):
    """What a Produce request or a Fetch response moved: `Charging` turns it into the charges of the
    quotas that count it (a NamedTuple: made once per Produce and Fetch, so it must be cheap)."""

    frame_bytes: int     # the whole frame, size prefix included: what the metrics count
    quota_bytes: int     # as Kafka's byte-rate quota counts it
    records: int = 0     # counted only when a record or batch quota, or the metrics, want them
    batches: int = 0
    topics: tuple[tuple[str, int], ...] | None = None   # (topic, bytes), for a topic pool that takes the principal


class Signals(NamedTuple):
    """What an adaptive pool hears of one answered request."""

    latency: float | None   # forward -> response, None when it measured something else (a Fetch's wait)
    throttle_ms: int        # the upstream's own throttle_time_ms
    timeouts: int = 0       # partitions answered REQUEST_TIMED_OUT


class SaslFrame(NamedTuple):
    """A SASL frame for the connection's authentication (`authentication.py`) to route."""

    authenticate: bool      # SaslAuthenticate (else SaslHandshake)
    version: int
    correlation_id: int
    body: memoryview
    now: float = 0.0        # when it was read (a session's lifetime starts at its login)


class Reply(NamedTuple):
    """What a response side made of one response."""

    frame: Parts                                # what to deliver (broker addresses already kqp's)
    fetched: Usage | None = None                # what it carried, charged to the consumer quotas
    mutations: tuple[MutationCharge, ...] = ()  # settled from the upstream's answer
    signals: Signals | None = None              # for the adaptive pools watching the request
    sasl_answer: bool = False                   # the upstream's SaslAuthenticate answer: authentication reads it


class Plan(NamedTuple):
    """One request's handling, as its handler decided it."""

    forward: Forward = AS_IS                    # what goes upstream; None: nothing
    answer: bytes | Pending | None = None       # kqp's own answer (a Pending: once its commit is done)
    produced: Usage | None = None               # what the request carries, charged when it is read
    mutations: tuple[MutationCharge, ...] = ()  # charged when it is read
    reply: Replier | None = None                # its response side; None: the response goes as it came
    watching: tuple[AdaptivePool, ...] = ()     # adaptive pools told of the request and its answer
    expects_response: bool = True               # False: none will come (acks=0 Produce)
    exempt: bool = False                        # not charged to request quotas (Kafka's exemptions)
    decided_on_response: bool = False           # its response is charged: its throttle is decided then
    count_records: bool = False                 # the address walk counts the response's records (Fetch v16+)
    sasl: SaslFrame | None = None               # routed by the connection's authentication first
    software: tuple[str, str] | None = None     # KIP-511's client software, named by ApiVersions v3+
    close: str | None = None                    # refused: close the connection unanswered (the logged reason)


#: The plan of every request kqp only passes through.
PASS = Plan()


class Request:
    """One request as a handler reads it: `frame` is the slices it arrived in (`size` bytes with the
    size prefix), `head` a contiguous start holding at least the header (and Produce's acks);
    `node` the broker it goes to (None: the bootstrap's); `authenticated` whether SASL is done;
    `host` the client's IP (ACLs name hosts)."""

    __slots__ = ("authenticated", "frame", "hdr", "head", "host", "looked_up", "node", "now", "principal", "size")

    def __init__(self, hdr: RequestHeader, head: memoryview, frame: Parts, size: int, principal: Principal,
                 now: float, authenticated: bool, looked_up: bool = False, node: int | None = None,
                 host: str = "") -> None:
        self.hdr, self.head, self.frame, self.size = hdr, head, frame, size
        self.principal, self.now, self.authenticated = principal, now, authenticated
        self.looked_up, self.node, self.host = looked_up, node, host


@dataclass(slots=True)
class Progress:
    """What a request's handling learns after it was read. The core writes it; `Awaiting` writes the
    answer a commit gives."""

    handler_seconds: float = 0.0             # the handler time spent on it so far
    throttle: Throttle | None = None         # decided once: when it was read, or when its response came
    counts: RecordCounts | None = None       # the response's records, counted on the address walk
    answer: bytes | Pending | None = None    # kqp's own answer, sent when its turn comes (None: none yet)


class Flight(NamedTuple):
    """A request kqp has read, until its response is delivered: its facts, frozen once it is planned,
    and its `progress`. Compared and hashed by identity, as two requests with the same facts are
    still two: adaptive pools key their unanswered requests by it. (A tuple: a frozen dataclass costs
    half a microsecond more to make, on every request.)"""

    correlation_id: int
    api_key: int
    api_version: int
    principal: Principal   # as it counts: a login kqp answers counts as the user it logs in
    read_at: float         # when kqp read the request (it forwards it then)
    plan: Plan
    progress: Progress
    node: int | None = None
    close_after: str | None = None   # close the connection once its answer is out (a failed login)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return id(self)

    @property
    def expects_response(self) -> bool:
        return self.plan.expects_response


class Replier:
    """A response side: reads one response for its plan. The base delivers it as it came."""

    def reply(self, flight: Flight, frame: Parts, body_offset: int, now: float) -> Reply:
        return Reply(frame)

    def withheld(self, flight: Flight, frame: Parts, body_offset: int, throttle_ms: int,
                 settings: CoreSettings) -> Parts | None:
        """The response to deliver instead under a throttle, when it withholds what was charged (the
        core then refunds it); None: delivered as read."""
        return None


class Handler:
    """One API's request side. This base passes every request through on its header alone."""

    #: Whether the request may come before a SASL login that kqp terminates (ApiVersions, SASL).
    before_authentication = False

    def plan(self, req: Request) -> Plan | Deferred:
        return PASS


def unawaited(in_flight: Iterable[Flight], correlation_id: int, peer: str) -> None:
    """A response that does not answer the oldest request in flight. One that answers a later
    request is out of order, which Kafka never does (ProtocolError); one that answers nothing kqp
    forwarded (librdkafka's mock cluster answers acks=0 Produce) is to be dropped: nobody awaits it."""
    flights = list(in_flight)
    if any(f.correlation_id == correlation_id for f in flights):
        raise ProtocolError(f"upstream answered {correlation_id} where {flights[0].correlation_id} was due")
    log.debug("client %s: dropping an upstream response to %d, which no request awaits", peer, correlation_id)
