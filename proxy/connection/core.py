"""One client connection and its one upstream connection, as a sans-io state machine.

`Connection.handle(event)` takes one event (`events.py`) and returns the actions to carry out, in
order. No asyncio, no sockets, no clock: every event carries the loop time, the handler-time clock is
injected (`CoreWiring.perf`), and the asyncio edge (`kqp.proxy.runtime.edge`) only converts. Each
request goes to the handler its API key has (`CoreWiring.handlers`), which returns a `Plan`; the core
carries it out: forwards it as it is read (never held), has `Charging` charge it, has the throttling
room decide its throttle once, where its charges are complete (as it is read, or as its charged
response comes back), muting from then, and keeps its `Flight` in a FIFO (Kafka answers in order).
Each response gets the one step every response shares (broker addresses made kqp's), its plan's
response side, its charges, and goes out at once carrying the request's throttle (KIP-219). Its
parts (`Establishing`, `Awaiting`, `Throttling`, `Authentication`) ask of it only what `host.Host`
offers. Its life is a `Phase`: on a client's EOF or the process's shutdown it drains and closes once
nothing is owed (`giving_up.py`), on `IdleCheck` when idle past `connections_max_idle_ms`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from kqp.protocol.addresses import may_carry_addresses
from kqp.protocol.apis import API_NAMES
from kqp.protocol.errors import ProtocolError
from kqp.protocol.frames import FrameReader
from kqp.protocol.headers import parse_request_header, response_body_offset, response_correlation_id
from kqp.protocol.parts import joined
from kqp.protocol.records import BodyError, RecordCounts
from kqp.proxy.connection.wiring import CoreWiring
from kqp.proxy.policies.pending import Pending

from . import events as ev
from .authentication import FORWARD, Authentication, Route
from .awaiting import Awaiting, ResponseHeld
from .establishing import Establishing
from .events import Action, Close, MuteReason, Parts, Send, Side
from .giving_up import drop_unforwarded, truncated
from .mute import MuteState
from .phases import Move, Phase, next_phase
from .plans import AS_IS, LOOK_UP, Flight, Plan, Progress, Reply, Request, unawaited
from .throttling import Throttling
from .upstream_login import UpstreamAuthError

__all__ = ["Connection"]

log = logging.getLogger("kqp.connection")

# How much of a split frame is read contiguously: a request's header, transactional id (at most
# 32 KiB) and acks; a response's header (with tagged fields nobody sends today).
SPLIT_HEAD_BYTES, RESPONSE_HEAD_BYTES = 40 * 1024, 4096
CONNECTING, DRAINING, CLOSED = Phase.CONNECTING, Phase.DRAINING, Phase.CLOSED   # looked up on every frame
# ... and these on every exchange: a member looked up on its Enum class is a Python call in 3.11.
CLIENT, UPSTREAM = Side.CLIENT, Side.UPSTREAM
IN_FLIGHT, RESPONSE_PENDING = MuteReason.IN_FLIGHT, MuteReason.RESPONSE_PENDING
NO_CAP = float("inf")
NO_MARK = -1.0   # `_clock_mark`: no handler-clock reading to start from (clocks read >= 0)


class Connection:
    """The client side and the upstream side of one proxied connection."""

    def __init__(self, wiring: CoreWiring, listener: str, node_id: int | None, peer: str = "?") -> None:
        self.wiring, self.listener, self.node_id, self.peer = wiring, listener, node_id, peer
        # One reader per direction: it says where the edge's next read lands and cuts the frames.
        self.requests = FrameReader(wiring.settings.max_frame_bytes, wiring.arena)
        self.responses = FrameReader(wiring.settings.max_frame_bytes, wiring.arena)
        self.in_flight: deque[Flight] = deque()
        self.mutes = MuteState()
        self.last_activity = 0.0
        self.phase = CONNECTING
        self.auth = Authentication(wiring.sasl, wiring.principals)
        self.throttling = Throttling(self, wiring.charging.observer, self.auth, lambda: wiring.settings.pacing)
        self.establishing: Establishing | None = Establishing(self, wiring, node_id, self.responses)
        self.awaiting = Awaiting(self, wiring)
        self._drain_reason = "client_closed"   # DRAINING: the close reason once nothing is owed
        self._out: list[Action] = []
        # The handler clock's reading at the end of this event's last timed segment: the next segment
        # of the same event starts there, so back-to-back frames cost one clock read each, not two
        # (the CPU clock is a system call, on a loaded host a slow one: `_segment_start`).
        self._clock_mark = NO_MARK

    # -- the one entry point -------------------------------------------------------------------
    def handle(self, event: ev.Event) -> list[Action]:
        """Take one event; return what to do, in order. A closed connection ignores everything."""
        if self.phase is CLOSED:
            return []
        out = self._out = []
        self._clock_mark = NO_MARK   # what ran between events (other connections, the loop) is no one's
        try:
            ON_EVENT[type(event)](self, event)
        except (ProtocolError, BodyError) as exc:
            self.close("protocol_error", f"bad request from client: {exc}")
        except UpstreamAuthError as exc:   # kqp's own login (`establishing.py`)
            self.close("upstream_auth_failed", str(exc))
        except Exception:
            # The one top-level guard: a bug closes this connection only, loudly.
            log.exception("client %s: unexpected error; closing the connection", self.peer)
            self.close("internal_error")
        return out

    @property
    def closed(self) -> bool:
        return self.phase is CLOSED

    @property
    def drained(self) -> bool:
        """Nothing owed to the client: no response in flight, no request waiting for a lookup (a
        request waiting for its key's line is owed only as buffered bytes are: `_close_if_done`)."""
        return not self.in_flight and self.awaiting.held_request is None

    @property
    def throttled(self) -> bool:
        return MuteReason.THROTTLED in self.mutes

    def muted(self, side: Side) -> bool:
        return self.mutes.muted(side)

    def keep_held(self) -> None:
        """What was read but not yet taken (muted, or incomplete) leaves the read arena every connection
        shares, which must not stay alive for it (`FrameReader.own`)."""
        if self.requests.buffered:
            self.requests.own()
        if self.responses.buffered:
            self.responses.own()

    @property
    def user(self) -> str:
        return self.auth.user

    # -- what the parts may ask (`host.Host`) --------------------------------------------------
    def emit(self, action: Action) -> None:
        self._out.append(action)

    def mute(self, reason: MuteReason) -> None:
        if self.mutes.mute(reason):
            self._out.append(ev.Mute(reason))

    def unmute(self, reason: MuteReason) -> bool:   # True: the reason was there and is lifted
        if lifted := self.mutes.unmute(reason):
            self._out.append(ev.Unmute(reason))
        return lifted

    def close(self, reason: str, message: str | None = None) -> None:
        if self.phase is CLOSED:
            return
        self._move(Move.CLOSE)
        # The parts that point back here let go: a closed connection is freed by reference counts.
        self.establishing = None
        self.awaiting.let_go()
        self.throttling.closed()
        if self.in_flight:   # adaptive pools stop waiting for these
            self.wiring.charging.unanswered(self.in_flight, reason == "upstream_closed")
        self._out.append(Close(reason, message))
        self.wiring.charging.observer.connection_closed(self.listener, reason)

    # -- the way to OPEN (`establishing.py`) ---------------------------------------------------
    def _client_connected(self, e: ev.ClientConnected) -> None:
        if e.user is not None:
            self.auth.adopt(e.user)
        self.auth.host = e.host
        self.last_activity = e.now
        self.wiring.charging.observer.connection_opened(self.listener)
        self.mute(MuteReason.CONNECTING)
        assert self.establishing is not None
        self.establishing.start(e.now)

    def _upstream_connected(self, e: ev.UpstreamConnected) -> None:
        assert self.establishing is not None
        move = self.establishing.upstream_connected(e)
        self._move(move)
        if move is Move.UPSTREAM_UP:
            self._established(e.now)

    def _upstream_connect_failed(self, e: ev.UpstreamConnectFailed) -> None:
        self.close("upstream_unknown" if e.unknown_broker else "upstream_unreachable", e.message)

    def _login_data(self, establishing: Establishing, e: ev.UpstreamData) -> None:
        try:
            done = establishing.login_data(e)
        except (ProtocolError, BodyError) as exc:
            self.close("upstream_protocol_error", f"bad frame from upstream during kqp's login: {exc}")
            return
        if done:
            self._move(Move.LOGGED_IN)
            self._established(e.now)

    def _established(self, now: float) -> None:
        """The upstream is ready: the timer, the upstream's bytes and its loss are the core's own
        again, and what the client sent goes."""
        self.establishing = None
        self._out.append(ev.SetTimer(None))
        self.unmute(MuteReason.CONNECTING)
        self._pump(now)

    # -- connection life -----------------------------------------------------------------------
    def _move(self, move: Move) -> None:
        self.phase = next_phase(self.phase, move)

    def _upstream_lost(self, e: ev.UpstreamLost) -> None:
        if (establishing := self.establishing) is not None:   # during kqp's own login
            establishing.login_lost(e)
            return
        if (refused := self.auth.refused_login) is not None and not self.in_flight:
            # Passthrough: a broker closes the connection of a login it refused, after the answer.
            self.close("authentication_failed", f"{refused}; the upstream closed the connection")
            return
        detail = f": {e.message}" if e.message else ""
        if self.in_flight:
            head = self.in_flight[0]
            detail += f" (awaiting the response to {API_NAMES.get(head.api_key, head.api_key)} v{head.api_version})"
        self.close("upstream_closed", f"upstream connection closed{detail}")

    def _client_lost(self, _e: ev.ClientLost) -> None:
        self._give_up("reset its connection")
        self.close(*self._client_gone())

    def _client_gone(self) -> tuple[str, str | None]:
        """Why the connection ends when its client hangs up: after a passthrough login the upstream
        refused, a client that hangs up on the refusal before the broker closes still failed it."""
        if (refused := self.auth.refused_login) is not None and not self.in_flight:
            return "authentication_failed", f"{refused}; the client closed the connection"
        return "client_closed", None

    def _client_eof(self, e: ev.ClientEof | ev.TimerFired) -> None:
        # Kafka clients never half-close: it is gone. What is owed still goes; what it left unforwarded
        # is dropped, nothing more read (giving_up.py). Unblocked, all left is a partial frame.
        self._move(Move.CLIENT_EOF)
        if self._blocked():
            self.mute(MuteReason.CLOSING)
            throttled = self.throttling.muted   # a frame cut short by a client giving up is no protocol error
            if (partial := self._give_up("closed its connection")) and not throttled:
                self.close("protocol_error", truncated(partial))
        self._close_if_done()

    def _give_up(self, how: str) -> int:
        """Drop what the client left unforwarded; the bytes of a frame it never finished, if that was all."""
        partial = drop_unforwarded(self.requests, self.awaiting.held_request, self.peer, self.wiring.charging.observer,
                                   how)
        self.awaiting.held_request = None
        return partial

    def _shutdown_begun(self, e: ev.ShutdownBegun) -> None:
        # Read no new requests (those read but not forwarded stay so); what is owed still goes.
        self._move(Move.SHUTDOWN)
        self._drain_reason = "shutdown"
        self.mute(MuteReason.CLOSING)
        self._close_if_done()

    def _close_requested(self, e: ev.CloseRequested) -> None:
        self.close(e.reason, e.message)

    def _idle_check(self, e: ev.IdleCheck) -> None:
        """Kafka's connections.max.idle.ms, whether or not the connection is muted."""
        idle_ms = self.wiring.settings.connections_max_idle_ms
        if (e.now - self.last_activity) * 1000 > idle_ms:
            self.close("idle", f"idle for more than {idle_ms} ms")

    def _close_if_done(self) -> None:
        """Draining: close once nothing is owed, or at a frame the half-closed client never finished."""
        if self.phase is not DRAINING:
            return
        shutdown = self._drain_reason == "shutdown"
        if not shutdown and self.requests.buffered and not self._blocked():
            # Every whole frame has been taken: what is left is a frame the client never finished.
            self.close("protocol_error", truncated(self.requests.buffered))
        elif self.drained and (shutdown or not self.requests.buffered):
            self.close(*((self._drain_reason, None) if shutdown else self._client_gone()))

    def _write_buffer(self, e: ev.WriteBuffer) -> None:
        # The upstream reads slower than the client sends: stop reading the client, and the other
        # way round; each side's reason is its own, so neither can resume the other's mute.
        reason = MuteReason.BACKPRESSURE if e.side is Side.UPSTREAM else MuteReason.CLIENT_SLOW
        (self.mute if e.full else self.unmute)(reason)

    def _blocked(self) -> bool:
        return self.phase is CONNECTING or self.mutes.blocks_requests

    def _timer_fired(self, e: ev.TimerFired) -> None:
        if (establishing := self.establishing) is not None:   # the way to OPEN's deadline
            establishing.timer_fired(e)
            return
        if e.client_gone:   # closed while muted: what it left is dropped before anything more is read
            self._client_eof(e)
        if self.throttling.timer_fired(e.now, e.unread):
            self._pump(e.now)

    # -- requests: client -> upstream ----------------------------------------------------------
    def _client_data(self, e: ev.ClientData) -> None:
        try:
            self.requests.received(e.data)
        except ProtocolError as exc:   # the framing itself: a lying or oversized length
            self.close("protocol_error", f"bad frame from client: {exc}")
            return
        self._pump(e.now)

    def _pump(self, now: float) -> None:
        while self.phase is not CLOSED and not self._blocked():
            got = self.requests.next_frame_parts(SPLIT_HEAD_BYTES)
            if got is None:
                break
            self._on_request(*got, now)
        self._close_if_done()

    def _on_request(self, head: memoryview, frame: Parts, now: float, looked_up: bool = False) -> None:
        """The dispatcher's request side: the API's handler plans the request, the core carries the
        plan out. `frame` is the slices it arrived in, `head` a contiguous start of it."""
        w = self.wiring
        clock = w.cpu if w.charging.quotas.handler_cpu else w.perf
        t0 = self._segment_start(clock)
        self.last_activity = now   # a whole request is activity, a trickled byte is not (slowloris)
        hdr = parse_request_header(head)
        handler = w.handlers[hdr.api_key]
        auth = self.auth
        if auth.guarded and (refusal := auth.refusal(hdr.api_key, handler.before_authentication, now)):
            self.close(*refusal)   # as Kafka: no answer, the connection closes
            return
        principal = auth.principal(hdr.client_id)
        size = sum(map(len, frame))
        if not looked_up:   # handed over again after a topic lookup: counted the first time
            w.charging.observer.request(principal, hdr.api_key, size)
        plan = handler.plan(Request(hdr, head, frame, size, principal, now, auth.authenticated, looked_up,
                                    self.node_id, auth.host))
        if plan is LOOK_UP:
            self.awaiting.look_up(frame)
            return
        assert isinstance(plan, Plan)
        if plan.close is not None:   # refused where the broker closes (an acks=0 Produce kqp does not authorize)
            self.close("authorization_failed", plan.close)
            return
        forward = frame if plan.forward is AS_IS else plan.forward
        answer, close_after = plan.answer, None
        if plan.sasl is not None or plan.software is not None:
            route = self._authenticate(plan)
            if route is None:
                return
            if (verdict := route.verdict) is not None:
                if verdict.user is not None:   # the answer already counts as the user it authenticates
                    principal = auth.principal(hdr.client_id)
                answer, close_after = verdict.answer, verdict.failure
            if answer is not None:   # kqp's authentication answers it: nothing goes upstream
                forward = None
        # The request's handler time so far is what its request quotas are charged; the rest of this
        # segment (charging, forwarding) counts towards the next one.
        mark = clock()
        flight = Flight(hdr.correlation_id, hdr.api_key, hdr.api_version, principal, now, plan,
                        Progress(mark - t0, None, RecordCounts() if plan.count_records else None, answer),
                        self.node_id, close_after)
        self._clock_mark = mark
        charging = w.charging
        violations = charging.charge_request(flight, now)
        if not plan.expects_response:
            # acks=0: no response will come, so the request is done; Kafka exempts it from request
            # quotas, byte-rate quotas still mute.
            violations += charging.charge_reply(flight, None, now)
        if forward is not None:
            self._out.append(Send(UPSTREAM, forward))
        if violations and not plan.decided_on_response:
            # Over quota (a Produce's bytes, its request quotas, a mutation the gate refused): the
            # request goes all the same and its response will carry the throttle, decided now; from
            # now nothing more is read, as a broker reads one request at a time.
            throttling = self.throttling
            if (throttle := throttling.decide(flight, violations, now)) is not None:
                flight.progress.throttle = throttle
                throttling.mute(flight, throttle, now)
        if not plan.expects_response:
            return
        if plan.decided_on_response and forward is not None and charging.charges_fetches(principal, True):
            # Its throttle is known only when the response is back: hold the next request until then.
            self.mute(RESPONSE_PENDING)
        self._await(flight, now)

    def _segment_start(self, clock: Callable[[], float]) -> float:
        """Where a request's or a response's handler time starts: where the event's last timed segment
        ended (the framing between them is this one's work), else now. The mark is taken: a segment
        that returns early leaves none, so its time is charged to no one, as before."""
        mark, self._clock_mark = self._clock_mark, NO_MARK
        return clock() if mark == NO_MARK else mark

    def _authenticate(self, plan: Plan) -> Route | None:
        """What the plan hands the connection's authentication: how its SASL frame is routed, or
        None when the connection closes."""
        auth = self.auth
        if plan.software is not None:
            auth.software = plan.software
        if plan.sasl is None:
            return FORWARD
        route = auth.route(plan.sasl)
        if route.refusal is not None:   # as Kafka: no answer, the connection closes
            self.close("authentication_required", route.refusal)
            return None
        return route

    def _await(self, flight: Flight, now: float) -> None:
        self.in_flight.append(flight)
        if (answer := flight.progress.answer) is not None:
            if isinstance(answer, Pending):   # the answer waits for a state file
                self.awaiting.commit(flight, answer)
            elif flight.close_after is not None:   # read nothing more: the answer goes, then the connection closes
                self.mute(MuteReason.CLOSING)
            self._flush_local(now)
        if len(self.in_flight) >= (self.wiring.settings.max_in_flight or NO_CAP) and self.phase is not CLOSED:
            self.mute(IN_FLIGHT)

    # -- responses: upstream -> client ---------------------------------------------------------
    def _upstream_data(self, e: ev.UpstreamData) -> None:
        if (establishing := self.establishing) is not None:   # the answers to kqp's own login
            self._login_data(establishing, e)
            return
        if self.awaiting.held_response is not None:   # what follows a response held for its listeners waits
            self._buffer_responses(e)
            return
        self._read_responses(e)

    def _read_responses(self, e: ev.UpstreamData) -> None:
        try:
            self.responses.received(e.data)
            while self.phase is not CLOSED:
                got = self.responses.next_frame_parts(RESPONSE_HEAD_BYTES)
                if got is None:
                    break
                self._on_response(*got, e.now)
        except ResponseHeld:   # what follows waits behind it until its listeners are ready
            if (held := self.awaiting.held_response) is not None:
                self.in_flight.appendleft(held[0])
        except (ProtocolError, BodyError) as exc:
            self.close("upstream_protocol_error", f"bad frame from upstream: {exc}")
            return
        self._close_if_done()

    def _buffer_responses(self, e: ev.UpstreamData) -> None:
        """Bytes that arrive while a response waits for listeners (read before the mute took hold)."""
        try:
            self.responses.received(e.data)
        except ProtocolError as exc:
            self.close("upstream_protocol_error", f"bad frame from upstream: {exc}")

    def _on_response(self, head: memoryview, frame: Parts, now: float, flight: Flight | None = None) -> None:
        """The dispatcher's response side: broker addresses first (any API's), then the request's
        plan. `flight`: the response waited for listeners, and its request was counted already."""
        w = self.wiring
        clock = w.cpu if w.charging.quotas.handler_cpu else w.perf
        t0 = self._segment_start(clock)
        counted = flight is not None
        if flight is None:
            correlation_id = response_correlation_id(head)
            if not self.in_flight or self.in_flight[0].correlation_id != correlation_id:
                unawaited(self.in_flight, correlation_id, self.peer)
                w.charging.observer.upstream_anomaly("unawaited")
                return
            flight = self.in_flight.popleft()
            w.charging.observer.response(flight.principal, flight.api_key, sum(map(len, frame)), now - flight.read_at)
        api, version = flight.api_key, flight.api_version
        body_offset = response_body_offset(api, version, head)
        if may_carry_addresses(api, version):
            # kqp's listener for every broker named (held when there is none yet: `awaiting.py`);
            # Fetch v16+: the walk to the NodeEndpoints tag counts the records when the plan asked.
            frame = self.awaiting.kqps_addresses(flight, head, frame, body_offset, counted)
        reply = None
        if (replier := flight.plan.reply) is not None:
            reply = replier.reply(flight, frame, body_offset, now)
            frame = reply.frame
            if reply.sasl_answer:
                self.auth.on_response(version, frame)
        seconds = (end := clock()) - t0
        flight.progress.handler_seconds += seconds
        self._clock_mark = end
        self._deliver(flight, frame, reply, body_offset, now, seconds)
        self._flush_local(now)
        if self.phase is CLOSED or not self.mutes.muted(CLIENT):   # nothing to lift: the usual case
            return
        lifted = len(self.in_flight) < (w.settings.max_in_flight or NO_CAP) and self.unmute(IN_FLIGHT)
        if (not self.in_flight and self.unmute(RESPONSE_PENDING)) or lifted:
            self._pump(now)   # back under the in-flight cap, or one at a time and none left: read on

    def _deliver(self, flight: Flight, frame: Parts, reply: Reply | None, body_offset: int, now: float,
                 seconds: float = 0.0) -> None:
        """Charge the response (`seconds`: the handler time spent on it), then KIP-219 for every
        version: the response goes now, carrying the request's throttle where the version has the
        field; the connection is muted for it since it was decided (now, for a charged response)."""
        charging, throttling = self.wiring.charging, self.throttling
        violations = charging.charge_reply(flight, reply, now, seconds)
        progress = flight.progress
        throttle, decided = progress.throttle, False
        if flight.plan.decided_on_response and violations:
            throttle = progress.throttle = throttling.decide(flight, violations, now)
            decided = throttle is not None
        if throttle is None:
            self._send_client(frame, now)
            throttling.answered(now)
            return
        if reply is not None and (replier := flight.plan.reply) is not None:
            withheld = replier.withheld(flight, frame, body_offset, throttle.ms, self.wiring.settings)
            if withheld is not None:   # as the broker: what is not delivered is not charged either
                charging.refund(flight, reply, now)
                frame = withheld
        frame, told = throttling.patched(flight, frame, body_offset, throttle, now)
        self._send_client(frame, now)
        if decided:   # the response goes first, then the mute (a broker mutes once it has sent it)
            throttling.mute(flight, throttle, now)
        throttling.told(flight, throttle, told, now)

    def _flush_local(self, now: float) -> None:
        """Send kqp's own answers that have reached the front of the in-flight FIFO."""
        while self.in_flight and isinstance(answer := self.in_flight[0].progress.answer, bytes):
            flight = self.in_flight.popleft()
            frame = memoryview(answer)
            self._deliver(flight, (frame,), None, response_body_offset(flight.api_key, flight.api_version, frame),
                          now)
            if flight.close_after is not None:
                self.close("authentication_failed", flight.close_after)
                return

    def _send_client(self, parts: Parts, now: float) -> None:
        self.last_activity = now
        self._out.append(Send(CLIENT, parts))

    # -- the runtime's answers (`awaiting.py`) -------------------------------------------------
    def _topics_looked_up(self, e: ev.TopicsLookedUp) -> None:
        if (request := self.awaiting.looked_up()) is not None:
            self._on_request(joined(request), request, e.now, looked_up=True)
        self.unmute(MuteReason.LOOKUP)
        self._pump(e.now)

    def _committed(self, e: ev.Committed) -> None:
        if not self.awaiting.committed(e):
            return
        self._flush_local(e.now)
        if self.phase is CLOSED:
            return
        self.unmute(MuteReason.COMMIT)
        if len(self.in_flight) < (self.wiring.settings.max_in_flight or NO_CAP):
            self.unmute(MuteReason.IN_FLIGHT)
        self._pump(e.now)

    def _listeners_ready(self, e: ev.ListenersReady) -> None:
        held = self.awaiting.listeners_ready(e)
        if held is None:
            return
        flight, head, frame = held
        self.in_flight.popleft()   # put back at the head when it was held: it is answered now
        self.unmute(MuteReason.LISTENERS)
        try:
            self._on_response(head, frame, e.now, flight)
        except ResponseHeld:   # closed: still no listener
            return
        except (ProtocolError, BodyError) as exc:   # as `_upstream_data` (read once already: not expected)
            self.close("upstream_protocol_error", f"bad frame from upstream: {exc}")
            return
        self._read_responses(ev.UpstreamData(e.now, b""))   # no new bytes: read on what waited behind it


# Each handler takes its own event type; the table never changes (a handler asks the state, kqp's own
# login under way or a response held for its listeners, what its event means now), and one serves every
# connection: a table of a connection's own bound methods made each one a reference cycle, freed only
# by the cyclic collector.
ON_EVENT: dict[type, Callable[[Connection, Any], None]] = {
    ev.ClientConnected: Connection._client_connected,
    ev.UpstreamConnected: Connection._upstream_connected,
    ev.UpstreamConnectFailed: Connection._upstream_connect_failed,
    ev.ClientData: Connection._client_data,
    ev.UpstreamData: Connection._upstream_data,
    ev.ClientEof: Connection._client_eof,
    ev.ClientLost: Connection._client_lost,
    ev.UpstreamLost: Connection._upstream_lost,
    ev.WriteBuffer: Connection._write_buffer,
    ev.TimerFired: Connection._timer_fired,
    ev.TopicsLookedUp: Connection._topics_looked_up,
    ev.ListenersReady: Connection._listeners_ready,
    ev.Committed: Connection._committed,
    ev.ShutdownBegun: Connection._shutdown_begun,
    ev.IdleCheck: Connection._idle_check,
    ev.CloseRequested: Connection._close_requested,
}
