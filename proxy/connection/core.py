"""One client connection and its one upstream connection, as a sans-io state machine.

`Connection.handle(event)` takes one event (`events.py`: bytes from either side, the upstream up or
lost, the client's EOF, a timer, a write buffer over its mark, the runtime's answers) and returns
the actions to carry out, in order: send parts to a side, mute or unmute with a named reason, set
the connection's timer, ask the runtime for an effect, close. No asyncio, no sockets, no clock:
every event carries the loop time, and the handler-time clock (`CoreParts.perf`) is injected; the
asyncio edge (`kqp.proxy.runtime.edge`) only converts. This module is the state machine (its life,
muting, the FIFO, delivery) and its one dispatcher: each request goes to the handler its API key has
in `CoreParts.handlers` (`handlers/`), and its response to the same handler, after the one step every
response shares (broker addresses rewritten to kqp's listeners). Two parts live beside it:
`establishing.py` (the way to OPEN: the connect deadline and kqp's upstream login) and `awaiting.py`
(what waits for the runtime: a topic lookup, a quota commit, listeners for new brokers).

* Frames go through as the slices they arrived in; only headers are always decoded. Responses come
  back in request order (Kafka guarantees it), so the requests awaiting one are a FIFO of
  `InFlight` records; kqp's own answers wait their turn in it. At `max_in_flight` of them the
  client is read no more until one is answered (as Kafka mutes a channel, never a close).
* Charging: one pair, `Charging.charge_request` when a request is read and `charge_response` when
  its response is back (`charging.py`); the violations go to the throttling room (`throttling.py`),
  which decides the request's one throttle (paced for a client that does not back off), mutes
  and unmutes for it, and tells the observer.
* KIP-219, for every version: a response goes out at once, `throttle_time_ms` raised where the
  version has the field, and the client side is muted for the throttle (`SetTimer`). Produce bytes
  over quota mute at once (a broker reads one request at a time); an acks=0 Produce is muted only.
  A throttled connection's next Produce or Fetch waits, read but uncharged, while what its key's
  other connections used since holds the key over quota (`Throttling.gate`; beyond Kafka).
* Misbehaving upstreams: a response to no request in flight is dropped and counted (`unawaited`);
  one whose `throttle_time_ms` kqp cannot reach goes out as it came.

Its life is a phase (`phases.py`) moved only through the phases' table. The core decides when it
ends: on a client's EOF (what it left unforwarded is dropped: `giving_up.py`) or the process's
shutdown it drains (reads no new request, delivers what is owed) and closes itself once nothing is
owed; on the process's periodic `IdleCheck` it closes itself when idle past
`connections_max_idle_ms`, muted or not (activity is a whole request read or a response sent, never
a trickled byte). Who the client is, is `authentication.py`'s.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from kqp.protocol.addresses import BrokerAddress, may_carry_addresses
from kqp.protocol.apis import API_NAMES
from kqp.protocol.errors import ProtocolError
from kqp.protocol.frames import FrameDecoder
from kqp.protocol.headers import parse_request_header, response_body_offset, response_correlation_id
from kqp.protocol.records import BodyError
from kqp.proxy.policies.quota_admin import PendingCommit

from . import events as ev
from .authentication import Authentication
from .awaiting import NO_CAP, Awaiting, ResponseHeld
from .establishing import Establishing
from .events import Action, Close, MuteReason, Parts, Send, Side
from .exchange import LOOK_UP, InFlight, Refused, Request, unawaited
from .giving_up import drop_unforwarded, truncated
from .mute import MuteState
from .parts import CoreParts
from .phases import Move, Phase, next_phase
from .throttling import Throttling
from .upstream_login import UpstreamAuthError, UpstreamLogin

__all__ = ["Connection"]

log = logging.getLogger("kqp.connection")

# How much of a split frame is read contiguously: a request's header, transactional id (at most
# 32 KiB) and acks; a response's header (with tagged fields nobody sends today).
SPLIT_HEAD_BYTES, RESPONSE_HEAD_BYTES = 40 * 1024, 4096
CONNECTING, DRAINING, CLOSED = Phase.CONNECTING, Phase.DRAINING, Phase.CLOSED   # looked up on every frame


class Connection(Establishing, Awaiting):
    """The client side and the upstream side of one proxied connection."""

    def __init__(self, parts: CoreParts, listener: str, node_id: int | None, peer: str = "?") -> None:
        self.parts, self.listener, self.node_id, self.peer = parts, listener, node_id, peer
        self.requests = FrameDecoder(parts.settings.max_frame_bytes)
        self.responses = FrameDecoder(parts.settings.max_frame_bytes)
        self.in_flight: deque[InFlight] = deque()
        self.mutes = MuteState()
        self.last_activity = 0.0
        self.phase = CONNECTING
        self.auth = Authentication(parts.sasl)
        self.throttling = Throttling(parts.charging.observer, self.mutes, self.auth, lambda: parts.settings.pacing)
        self._held: Parts | None = None   # a mutation request waiting for a topic lookup
        self._gated: tuple[memoryview, Parts] | None = None   # a request read, waiting for its key's line
        self._committing: tuple[InFlight, PendingCommit] | None = None   # an answer waiting for its commit
        self._held_response: tuple[memoryview, Parts] | None = None      # a response waiting for listeners
        self._missing: list[BrokerAddress] = []
        self._login: UpstreamLogin | None = None
        self._deadline = 0.0
        self._drain_reason = "client_closed"   # DRAINING: the close reason once nothing is owed
        self._out: list[Action] = []
        self._on_event: dict[type, Callable[[ev.Event], None]] = {
            ev.ClientConnected: self._client_connected,
            ev.UpstreamConnected: self._upstream_connected,
            ev.UpstreamConnectFailed: self._upstream_connect_failed,
            ev.ClientData: self._client_data,
            ev.UpstreamData: self._upstream_data,
            ev.ClientEof: self._client_eof,
            ev.ClientLost: lambda e: (self._give_up("reset its connection"), self._close("client_closed")),
            ev.UpstreamLost: self._upstream_lost,
            ev.WriteBuffer: self._write_buffer,
            ev.TimerFired: self._timer_fired,
            ev.TopicsLookedUp: self._topics_looked_up,
            ev.ListenersReady: self._listeners_ready,
            ev.QuotasCommitted: self._quotas_committed,
            ev.ShutdownBegun: self._shutdown_begun,
            ev.IdleCheck: self._idle_check,
            ev.CloseRequested: lambda e: self._close(e.reason, e.message),
        }

    # -- the one entry point -------------------------------------------------------------------
    def handle(self, event: ev.Event) -> list[Action]:
        """Take one event; return what to do, in order. A closed connection ignores everything."""
        if self.phase is CLOSED:
            return []
        out = self._out = []
        try:
            self._on_event[type(event)](event)
        except (ProtocolError, BodyError) as exc:
            self._close("protocol_error", f"bad request from client: {exc}")
        except UpstreamAuthError as exc:   # kqp's own login (`establishing.py`)
            self._close("upstream_auth_failed", str(exc))
        except Exception:
            # The one top-level guard: a bug closes this connection only, loudly.
            log.exception("client %s: unexpected error; closing the connection", self.peer)
            self._close("internal_error")
        return out

    @property
    def closed(self) -> bool:
        return self.phase is CLOSED

    @property
    def drained(self) -> bool:
        """Nothing owed to the client: no response in flight, no request waiting for a lookup (a
        request waiting for its key's line is owed only as buffered bytes are: `_close_if_done`)."""
        return not self.in_flight and self._held is None

    @property
    def throttled(self) -> bool:
        return MuteReason.THROTTLED in self.mutes

    def muted(self, side: Side) -> bool:
        return self.mutes.muted(side)

    @property
    def user(self) -> str:
        return self.auth.user

    # -- connection life -----------------------------------------------------------------------
    def _move(self, move: Move) -> None:
        self.phase = next_phase(self.phase, move)

    def _upstream_lost(self, e: ev.UpstreamLost) -> None:
        if (refused := self.auth.refused_login) is not None and not self.in_flight:
            # Passthrough: a broker closes the connection of a login it refused, after the answer.
            self._close("authentication_failed", f"{refused}; the upstream closed the connection")
            return
        detail = f": {e.message}" if e.message else ""
        if self.in_flight:
            head = self.in_flight[0]
            detail += f" (awaiting the response to {API_NAMES.get(head.api_key, head.api_key)} v{head.api_version})"
        self._close("upstream_closed", f"upstream connection closed{detail}")

    def _client_eof(self, e: ev.ClientEof | ev.TimerFired) -> None:
        # Kafka clients never half-close: it is gone. What is owed still goes; what it left unforwarded
        # is dropped, nothing more read (giving_up.py). Unblocked, all left is a partial frame.
        self._move(Move.CLIENT_EOF)
        if self._blocked():
            self._mute(MuteReason.CLOSING)
            throttled = self.throttling.muted   # a frame cut short by a client giving up is no protocol error
            if (partial := self._give_up("closed its connection")) and not throttled:
                self._close("protocol_error", truncated(partial))
        self._close_if_done()

    def _give_up(self, how: str) -> int:
        """Drop what the client left unforwarded; the bytes of a frame it never finished, if that was all."""
        held = self._held if self._gated is None else self._gated[1]   # at most one: reading stops at either
        partial = drop_unforwarded(self.requests, held, self.peer, self.parts.charging.observer, how)
        self._held = self._gated = None
        return partial

    def _shutdown_begun(self, e: ev.ShutdownBegun) -> None:
        # Read no new requests (those read but not forwarded stay so); what is owed still goes.
        self._move(Move.SHUTDOWN)
        self._drain_reason = "shutdown"
        self._mute(MuteReason.CLOSING)
        self._close_if_done()

    def _idle_check(self, e: ev.IdleCheck) -> None:
        """Kafka's connections.max.idle.ms, whether or not the connection is muted."""
        idle_ms = self.parts.settings.connections_max_idle_ms
        if (e.now - self.last_activity) * 1000 > idle_ms:
            self._close("idle", f"idle for more than {idle_ms} ms")

    def _close_if_done(self) -> None:
        """Draining: close once nothing is owed, or at a frame the half-closed client never finished."""
        if self.phase is not DRAINING:
            return
        shutdown = self._drain_reason == "shutdown"
        if not shutdown and self.requests.buffered and not self._blocked():
            # Every whole frame has been taken: what is left is a frame the client never finished.
            self._close("protocol_error", truncated(self.requests.buffered))
        elif self.drained and (shutdown or not (self.requests.buffered or self._gated)):
            self._close(self._drain_reason)

    def _close(self, reason: str, message: str | None = None) -> None:
        if self.phase is CLOSED:
            return
        self._move(Move.CLOSE)
        self.throttling.closed()
        if self.in_flight:   # adaptive pools stop waiting for these (issue 22)
            self.parts.charging.unanswered(self.in_flight, reason == "upstream_closed")
        self._out.append(Close(reason, message))
        self.parts.charging.observer.connection_closed(self.listener, reason)

    def _write_buffer(self, e: ev.WriteBuffer) -> None:
        # The upstream reads slower than the client sends: stop reading the client, and the other
        # way round; each side's reason is its own, so neither can resume the other's mute.
        reason = MuteReason.BACKPRESSURE if e.side is Side.UPSTREAM else MuteReason.CLIENT_SLOW
        (self._mute if e.full else self._unmute)(reason)

    # -- muting and the throttle timer ---------------------------------------------------------
    def _mute(self, reason: MuteReason) -> None:
        if self.mutes.mute(reason):
            self._out.append(ev.Mute(reason))

    def _unmute(self, reason: MuteReason) -> bool:   # True: the reason was there and is lifted
        if lifted := self.mutes.unmute(reason):
            self._out.append(ev.Unmute(reason))
        return lifted

    def _blocked(self) -> bool:
        return self.phase is CONNECTING or self.mutes.blocks_requests

    def _timer_fired(self, e: ev.TimerFired) -> None:
        if e.client_gone:   # closed while muted: what it left is dropped before anything more is read
            self._client_eof(e)
        if self.throttling.timer_fired(e.now, self._out, e.unread):
            self._pump(e.now)

    # -- requests: client -> upstream ----------------------------------------------------------
    def _client_data(self, e: ev.ClientData) -> None:
        try:
            self.requests.feed(e.data)
        except ProtocolError as exc:   # the framing itself: a lying or oversized length
            self._close("protocol_error", f"bad frame from client: {exc}")
            return
        self._pump(e.now)

    def _pump(self, now: float) -> None:
        while self.phase is not CLOSED and not self._blocked():
            # A request waiting for its key's line was read first: it goes first.
            got, self._gated = self._gated or self.requests.next_frame_parts(SPLIT_HEAD_BYTES), None
            if got is None:
                break
            head, parts = got
            self._on_request(head, parts, now)
        self._close_if_done()

    def _on_request(self, head: memoryview, frame: Parts, now: float, looked_up: bool = False) -> None:
        """The dispatcher's request side: `frame` is the slices the request arrived in, `head` a
        contiguous start of it. Its API's handler says what goes upstream and what it used."""
        p = self.parts
        t0 = p.perf()
        self.last_activity = now   # a whole request is activity, a trickled byte is not (slowloris)
        hdr = parse_request_header(head)
        auth = self.auth
        if not auth.authenticated and (refusal := auth.refusal(hdr.api_key)) is not None:
            self._close("authentication_required", refusal)   # as Kafka: no answer, the connection closes
            return
        principal = auth.principal(hdr.client_id)
        if self.throttling.lines and self.throttling.gate(hdr.api_key, principal, now, self._out):
            self._gated = (head, frame)   # its key's other connections hold it over quota: read it again then
            return
        size = sum(map(len, frame))
        if not looked_up:   # handed over again after a topic lookup: counted the first time
            p.charging.observer.request(principal, hdr.api_key, size)
        handler = p.handlers[hdr.api_key]
        entry = InFlight(hdr.correlation_id, hdr.api_key, hdr.api_version, principal, now, handler)
        try:
            forward = handler.on_request(Request(hdr, head, frame, size, entry, auth, looked_up, self.node_id))
        except Refused as refused:
            self._close(refused.reason, refused.message)
            return
        if forward is LOOK_UP:
            self._hold(frame)
            return
        charging = p.charging
        violations = charging.charge_request(entry, now)
        if forward is not None:
            self._out.append(Send(Side.UPSTREAM, forward))
        entry.handler_seconds = p.perf() - t0
        principal = entry.principal
        throttling = self.throttling
        if not entry.expects_response:
            # acks=0: no response will come, so the request is done; Kafka exempts it from request
            # quotas, byte-rate quotas still mute.
            throttling.throttle(throttling.decide(entry, charging.charge_response(entry, now)), now, self._out)
            return
        if violations:
            # Over quota already (a Produce's bytes, a mutation the gate throttled): read nothing
            # more until the throttle has passed, as the broker, which reads one request at a time,
            # would; the request's throttle is decided, and counted, when its response is back.
            throttling.hold(throttling.decide(entry, violations), now, self._out)
        if forward is not None and charging.throttles_on_response(principal):
            # Its throttle is known only when the response is back: hold the next request until then.
            self._mute(MuteReason.RESPONSE_PENDING)
        self._await(entry, now)

    def _await(self, entry: InFlight, now: float) -> None:
        self.in_flight.append(entry)
        if (answer := entry.local_response) is not None:
            if isinstance(answer, PendingCommit):   # the answer waits for the state file (`awaiting.py`)
                self._await_commit(entry, answer)
            elif entry.close_after is not None:   # read nothing more: the answer goes, then the connection closes
                self._mute(MuteReason.CLOSING)
            self._flush_local(now)
        if len(self.in_flight) >= (self.parts.settings.max_in_flight or NO_CAP) and self.phase is not CLOSED:   # cap
            self._mute(MuteReason.IN_FLIGHT)

    # -- responses: upstream -> client ---------------------------------------------------------
    def _upstream_data(self, e: ev.UpstreamData) -> None:
        try:
            self.responses.feed(e.data)
            while self.phase is not CLOSED:
                got = self.responses.next_frame_parts(RESPONSE_HEAD_BYTES)
                if got is None:
                    break
                self._on_response(*got, e.now)
        except ResponseHeld:   # what follows waits behind it until its listeners are ready (`awaiting.py`)
            pass
        except (ProtocolError, BodyError) as exc:
            self._close("upstream_protocol_error", f"bad frame from upstream: {exc}")
            return
        self._close_if_done()

    def _on_response(self, head: memoryview, frame: Parts, now: float, counted: bool = False) -> None:
        """The dispatcher's response side: `frame` is the slices the response arrived in, `head` a
        contiguous start of it. Broker addresses first (any API's), then its request's handler.
        `counted`: it waited for listeners and has been counted already."""
        p = self.parts
        t0 = p.perf()
        correlation_id = response_correlation_id(head)
        if not self.in_flight or self.in_flight[0].correlation_id != correlation_id:
            unawaited(self.in_flight, correlation_id, self.peer)
            p.charging.observer.upstream_anomaly("unawaited")
            return
        entry = self.in_flight.popleft()
        api, version = entry.api_key, entry.api_version
        if not counted:
            p.charging.observer.response(entry.principal, api, sum(map(len, frame)), now - entry.sent_at)
        body_offset = response_body_offset(api, version, head)
        if may_carry_addresses(api, version):
            # kqp's listener for every broker named (held when there is none yet: `awaiting.py`);
            # Fetch v16+: the walk to the NodeEndpoints tag counts the batches on the way when the
            # handler asked (`InFlight.counts`).
            frame = self._kqps_addresses(entry, head, frame, body_offset, counted)
        if entry.handler.reads_responses:
            frame = entry.handler.on_response(entry, frame, body_offset, now, self.auth)
        entry.handler_seconds += p.perf() - t0
        self._deliver(entry, frame, body_offset, now)
        self._flush_local(now)
        cap = p.settings.max_in_flight or NO_CAP
        open_ = self.phase is not CLOSED
        lifted = open_ and len(self.in_flight) < cap and self._unmute(MuteReason.IN_FLIGHT)
        if open_ and ((not self.in_flight and self._unmute(MuteReason.RESPONSE_PENDING)) or lifted):
            self._pump(now)   # back under the in-flight cap, or one at a time and none left: read on

    def _deliver(self, entry: InFlight, frame: Parts, body_offset: int, now: float) -> None:
        """Charge the response, then KIP-219 for every version: the response goes now, carrying the
        request's throttle where the version has the field, and the connection is muted for it."""
        violations = self.parts.charging.charge_response(entry, now)
        throttling = self.throttling
        throttle = throttling.decide(entry, violations) if violations else None
        if throttle is None:
            self._send_client(frame, now)
            throttling.answered(now)
            return
        self._send_client(throttling.throttled_response(entry, frame, body_offset, throttle, now, self.parts.settings),
                          now)
        throttling.throttle(throttle, now, self._out)

    def _flush_local(self, now: float) -> None:
        """Send kqp's own answers that have reached the front of the in-flight FIFO."""
        while self.in_flight and self.in_flight[0].local_response is not None:
            entry = self.in_flight.popleft()
            frame = memoryview(entry.local_response)
            self._deliver(entry, (frame,), response_body_offset(entry.api_key, entry.api_version, frame), now)
            if entry.close_after is not None:
                self._close("authentication_failed", entry.close_after)
                return

    def _send_client(self, parts: Parts, now: float) -> None:
        self.last_activity = now
        self._out.append(Send(Side.CLIENT, parts))

