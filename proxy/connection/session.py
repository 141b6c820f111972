"""One client connection and its one upstream connection: forwarding, attribution, KIP-219 muting.

Frames are forwarded as the slices they arrived in; only the request header is always decoded.
Bodies are read for the few APIs kqp must look into (Produce acks and record counts, Fetch
max_bytes and record counts, responses that carry broker addresses) and rewritten only when a value
changes. Responses come back in request order per connection (Kafka guarantees it), so the in-flight
requests are a FIFO; requests kqp answers itself (ApiVersions) wait their turn in that FIFO.

Throttling (KIP-219): a response whose version honours client-side throttling goes out at once with
`throttle_time_ms` filled, then the connection is muted until the throttle has passed; an older
version's response is held for the throttle time (and later responses queue behind it); acks=0
Produce is muted only. A muted connection is not read, and frames read before the mute wait in the
decoder, so the upstream sees nothing from it before the throttle has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any

from kqp.protocol.addresses import may_carry_addresses, rewrite_addresses_parts
from kqp.protocol.api_versions import encode_api_versions_response
from kqp.protocol.apis import API_NAMES, should_client_throttle
from kqp.protocol.errors import ProtocolError
from kqp.protocol.fetch import empty_fetch_response
from kqp.protocol.frames import FrameDecoder
from kqp.protocol.headers import parse_request_header, response_body_offset, response_correlation_id
from kqp.protocol.produce import produce_acks
from kqp.protocol.records import BodyError, RecordCounts
from kqp.protocol.throttle import throttle_patch_parts
from kqp.proxy.runtime.context import ProxyContext
from kqp.proxy.runtime.upstream_side import UpstreamSide
from kqp.quotas.manager import Violation
from kqp.quotas.model import ANONYMOUS, Principal
from kqp.quotas.throttle import combine

from .in_flight import InFlight
from .metering import capped_fetch, charge_fetch, charge_produce, fetch_needs_counts
from .mutation_gate import GATED_APIS, Rewrite, gate_for
from .mute import MuteReason, MuteState
from .outbox import Outbox, Parts

log = logging.getLogger("kqp.session")

PRODUCE, FETCH, API_VERSIONS = 0, 1, 18
WRITE_HIGH_WATER = 1024 * 1024
# A request split over several reads is read through its first bytes only, when that is enough:
# Produce's header, transactional id and acks fit (a transactional id is at most 32 KiB).
SPLIT_HEAD_BYTES = 40 * 1024
# A response is read through its header only (correlation id, then tagged fields nobody sends today);
# its body is read as the parts it arrived in.
RESPONSE_HEAD_BYTES = 4096
# Reasons that stop kqp forwarding requests it has already read (backpressure only stops reading).
_BLOCKING = frozenset({MuteReason.THROTTLED, MuteReason.CONNECTING, MuteReason.CLOSING, MuteReason.LOOKUP})


class ClientSession(asyncio.Protocol):
    """The client side of a connection pair; owns the upstream side."""

    def __init__(self, ctx: ProxyContext, listener: str, node_id: int | None) -> None:
        self.ctx = ctx
        self.listener = listener
        self.node_id = node_id
        self.peer = "?"
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.requests = FrameDecoder(ctx.config.max_frame_bytes)
        self.responses = FrameDecoder(ctx.config.max_frame_bytes)
        self.in_flight: deque[InFlight] = deque()
        self.outbox = Outbox(self._write)
        self.muted_until = 0.0
        self.last_activity = ctx.now()
        self.closed = False
        self._client_eof = False
        self.mute = MuteState(self._pause_client, self._resume_client)
        self._mute_handle: object | None = None
        self._principals: dict[str | None, Principal] = {}
        # Correlation ids of recent acks=0 Produce requests. A broker never answers them, but some
        # upstreams do (librdkafka's mock cluster answers kafka-python's Produce v9): such an
        # answer is dropped, since the client expects none and kqp owes none.
        self._unanswered: deque[int] = deque(maxlen=64)
        self._connect_task: asyncio.Task[None] | None = None
        self.gate = gate_for(ctx)
        # A metadata lookup a mutation request waits for: no later request is read meanwhile.
        self._held: asyncio.Task[None] | None = None

    # -- muting: named reasons, reading resumes only when none is left ------------------------
    def _pause_client(self) -> None:
        if self.client is not None and not self.closed:
            self.client.pause_reading()

    def _resume_client(self) -> None:
        if self.client is not None and not self.closed:
            self.client.resume_reading()

    def _mute(self, reason: MuteReason) -> None:
        if reason is MuteReason.THROTTLED and reason not in self.mute:
            self.ctx.observer.muted(1)
        self.mute.mute(reason)

    def _unmute(self, reason: MuteReason) -> None:
        if reason is MuteReason.THROTTLED and reason in self.mute:
            self.ctx.observer.muted(-1)
        self.mute.unmute(reason)

    @property
    def throttled(self) -> bool:
        return MuteReason.THROTTLED in self.mute

    # -- client transport callbacks ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio subclasses
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.ctx.sessions.add(self)
        self.ctx.observer.connection_opened(self.listener)
        self._mute(MuteReason.CONNECTING)
        self._connect_task = self.ctx.loop.create_task(self._connect_upstream())

    async def _connect_upstream(self) -> None:
        target = self.ctx.cluster.upstream_for(self.node_id)
        if target is None:
            self.close("upstream_unknown", f"kqp knows no upstream address for broker {self.node_id}")
            return
        timeout = self.ctx.config.upstream.connect_timeout_ms / 1000
        try:
            transport, _ = await asyncio.wait_for(
                self.ctx.loop.create_connection(lambda: UpstreamSide(self), target.host, target.port),
                timeout,
            )
        except (OSError, TimeoutError) as exc:
            self.close("upstream_unreachable", f"upstream {target} unreachable: {exc or type(exc).__name__}")
            return
        if self.closed:
            transport.close()
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[attr-defined]
        self.upstream = transport  # type: ignore[assignment]
        self._unmute(MuteReason.CONNECTING)
        self._guarded(self._pump_requests)
        self._close_if_done()

    def data_received(self, data: bytes) -> None:
        self.last_activity = self.ctx.now()
        try:
            self.requests.feed(data)
        except ProtocolError as exc:
            self.close("protocol_error", f"bad frame from client: {exc}")
            return
        self._guarded(self._pump_requests)

    def eof_received(self) -> bool:
        # The client half-closed: no more requests. Let owed responses drain, then close.
        self._client_eof = True
        self._close_if_done()
        return True

    def _close_if_done(self) -> None:
        if not self._client_eof:
            return
        if self.requests.buffered and not self._blocked():
            # Every whole frame has been taken: what is left is a frame the client never finished.
            self.close("protocol_error", f"truncated frame: the client closed the connection mid-frame "
                       f"({self.requests.buffered} bytes of it received)")
        elif self.drained and not self.requests.buffered:
            self.close("client_closed", None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close("client_closed", None)

    def pause_writing(self) -> None:          # the client reads slower than the upstream answers
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and not self.closed:
            self.upstream.resume_reading()

    # -- requests: client -> upstream ----------------------------------------------------------
    def _pump_requests(self) -> None:
        while self.upstream is not None and not self.closed and not self._blocked():
            got = self.requests.next_frame_parts(SPLIT_HEAD_BYTES)
            if got is None:
                return
            head, parts = got
            self._on_request(head, parts=parts if len(parts) > 1 else None)

    def _blocked(self) -> bool:
        return not self.mute.reasons.isdisjoint(_BLOCKING)

    def _principal(self, client_id: str | None) -> Principal:
        p = self._principals.get(client_id)
        if p is None:
            p = Principal(ANONYMOUS, client_id or "")
            self._principals[client_id] = p
        return p

    def _on_request(self, frame: memoryview, looked_up: bool = False,
                    parts: tuple[memoryview, ...] | None = None) -> None:
        """One request. `parts` is set when the frame spanned several reads: `frame` is then only
        its head, enough for the header, and a Produce request's parts are forwarded as they are
        (no join; its records are counted across them). Other split requests are joined."""
        t0 = time.perf_counter()
        ctx = self.ctx
        now = ctx.now()
        hdr = parse_request_header(frame)
        api, version = hdr.api_key, hdr.api_version
        principal = self._principal(hdr.client_id)
        if parts is not None and api != PRODUCE:
            frame, parts = memoryview(b"".join(parts)), None
        size = len(frame) if parts is None else sum(map(len, parts))
        ctx.observer.request(principal, api, size)
        if api == API_VERSIONS:
            answer = encode_api_versions_response(version, hdr.correlation_id, ctx.cluster.api_ranges)
            self.in_flight.append(InFlight(hdr.correlation_id, api, version, principal, now,
                                           time.perf_counter() - t0, local_response=answer))
            self._flush_local()
            return
        violations: list[Violation] = []
        expects_response = True
        rewrite: Rewrite | None = None
        local: bytes | None = None
        if api == PRODUCE:
            body = frame[hdr.body_offset:]
            expects_response = produce_acks(version, body) != 0
            violations = charge_produce(ctx, principal, size, parts or (frame,), hdr.body_offset, version, now)
        elif api == FETCH:
            frame = capped_fetch(ctx, principal, frame, hdr.body_offset, version)
        elif api in GATED_APIS:
            plan = self.gate.plan(principal, hdr, frame, now, looked_up)
            if plan.lookup is not None:
                self._hold(plan.lookup, frame)
                return
            frame, violations, rewrite, local = plan.frame, plan.violations, plan.rewrite, plan.answer
        assert self.upstream is not None
        if parts is not None:
            self.upstream.writelines(parts)
        elif local is None:
            self.upstream.write(frame)
        handler = time.perf_counter() - t0
        if expects_response:
            self.in_flight.append(InFlight(hdr.correlation_id, api, version, principal, now, handler, violations,
                                           local_response=local, rewrite=rewrite))
            if violations:
                # Over quota already (produce bytes are known now): read nothing more until the
                # throttle has passed, as the broker, which reads one request at a time, would.
                throttle, _ = combine(violations)
                if throttle > 0:
                    self._mute_until(now + throttle)
            if local is not None:
                self._flush_local()
            return
        # acks=0 Produce: no response will come, so the throttle can only be a mute.
        self._unanswered.append(hdr.correlation_id)
        violations.extend(ctx.quotas.record_request(principal, handler, now))
        ctx.observer.handler_time(principal, handler)
        throttle = self._throttle_of(principal, violations)
        if throttle > 0:
            self._mute_until(now + throttle)

    def _hold(self, lookup: Coroutine[Any, Any, None], frame: memoryview) -> None:
        """Run the metadata lookup a mutation request needs, reading nothing more meanwhile, then
        plan the same request again: the connection's order is kept."""
        self._mute(MuteReason.LOOKUP)
        self._held = task = self.ctx.loop.create_task(lookup)
        task.add_done_callback(lambda _: self._resume_held(frame))

    def _resume_held(self, frame: memoryview) -> None:
        self._held = None
        if self.closed:
            return
        self._guarded(lambda: self._on_request(frame, looked_up=True))
        self._unmute(MuteReason.LOOKUP)
        self._guarded(self._pump_requests)

    # -- responses: upstream -> client ---------------------------------------------------------
    def on_upstream_data(self, data: bytes) -> None:
        try:
            self.responses.feed(data)
            while not self.closed:
                got = self.responses.next_frame_parts(RESPONSE_HEAD_BYTES)
                if got is None:
                    break
                self._on_response(*got)
        except (ProtocolError, BodyError) as exc:
            self.close("upstream_protocol_error", f"bad frame from upstream: {exc}")
        except Exception:
            log.exception("client %s: unexpected error handling an upstream response; closing", self.peer)
            self.close("internal_error", None)

    def _on_response(self, head: memoryview, parts: Parts) -> None:
        """One response: `parts` is the frame as it arrived, `head` its start, enough for the header.
        Produce and Fetch responses are read across the parts; others are joined if split."""
        t0 = time.perf_counter()
        ctx = self.ctx
        now = ctx.now()
        correlation_id = response_correlation_id(head)
        if correlation_id in self._unanswered and (
                not self.in_flight or self.in_flight[0].correlation_id != correlation_id):
            self._unanswered.remove(correlation_id)
            return
        if not self.in_flight or self.in_flight[0].local_response is not None:
            raise ProtocolError(f"response {correlation_id} to no request")
        entry = self.in_flight.popleft()
        if entry.correlation_id != correlation_id:
            raise ProtocolError(f"response {correlation_id} where {entry.correlation_id} was due")
        api, version, principal = entry.api_key, entry.api_version, entry.principal
        ctx.observer.response(principal, api, sum(map(len, parts)), now - entry.sent_at)
        body_offset = response_body_offset(api, version, head)
        if len(parts) > 1 and api != PRODUCE and api != FETCH:
            parts = (memoryview(b"".join(parts)),)
        if entry.rewrite is not None:
            parts = (memoryview(entry.rewrite(parts[0], body_offset)),)
        counts: RecordCounts | None = None
        if may_carry_addresses(api, version):
            # Fetch v16+: the walk to the NodeEndpoints tag passes every batch; count them on the way.
            if api == FETCH and fetch_needs_counts(ctx, principal):
                counts = RecordCounts()
            rewritten, seen = rewrite_addresses_parts(api, version, parts, body_offset, ctx.listeners.map_address,
                                                      counts)
            ctx.cluster.learn(seen)
            if rewritten is not None:
                parts = rewritten
        violations = entry.violations
        if api == FETCH:
            violations = violations + charge_fetch(ctx, entry, parts, body_offset, now, counts)
        handler = entry.handler_seconds + (time.perf_counter() - t0)
        violations = violations + ctx.quotas.record_request(principal, handler, now)
        ctx.observer.handler_time(principal, handler)
        throttle = self._throttle_of(principal, violations)
        self._deliver(entry, parts, body_offset, throttle, now)
        self._flush_local()

    def _throttle_of(self, principal: Principal, violations: list[Violation]) -> float:
        """KIP-124 co-existence: one throttle, the largest of the request's quota throttles."""
        if not violations:
            return 0.0
        throttle, quota_type = combine(violations)
        if quota_type is not None:
            self.throttle_cause = (principal, quota_type)   # read by the delay-queue and muted gauges
            self.ctx.observer.throttled(principal, quota_type, throttle)
        return throttle

    def _deliver(self, entry: InFlight, parts: Parts, body_offset: int, throttle: float, now: float) -> None:
        if throttle <= 0:
            self._send(parts)
            return
        api, version = entry.api_key, entry.api_version
        throttle_ms = max(1, round(throttle * 1000))
        if should_client_throttle(api, version):
            if api == FETCH and self.ctx.config.fetch_throttle == "empty" and entry.fetched is not None:
                # As the broker does: the data is not delivered, so it is not charged either.
                self.ctx.quotas.unrecord_fetch(entry.principal, *entry.fetched, now)
                parts = (empty_fetch_response(version, parts, body_offset, throttle_ms),)
            # Views of the response around a new throttle field: a throttled Fetch response is not copied.
            patched = throttle_patch_parts(api, version, parts, body_offset, throttle_ms)
            self._send(patched if patched is not None else parts)
        else:
            # The client would not back off by itself: hold the response back for the throttle time.
            # Like the broker, still report the delay in throttle_time_ms where the version has
            # the field; the field is informational here, so an upstream response kqp cannot walk
            # (librdkafka's mock omits a Produce v5 field) goes out as the upstream sent it.
            patched = None
            with contextlib.suppress(ProtocolError, BodyError):
                patched = throttle_patch_parts(api, version, parts, body_offset, throttle_ms)
            self.outbox.hold(patched if patched is not None else parts, now + throttle)
            self.ctx.delay.schedule(self, now + throttle)
        self._mute_until(now + throttle)

    def _flush_local(self) -> None:
        """Send kqp's own answers that have reached the front of the in-flight FIFO."""
        while self.in_flight and self.in_flight[0].local_response is not None:
            entry = self.in_flight.popleft()
            now = self.ctx.now()
            violations = entry.violations + self.ctx.quotas.record_request(entry.principal, entry.handler_seconds, now)
            throttle = self._throttle_of(entry.principal, violations)
            assert entry.local_response is not None
            frame = entry.local_response
            if throttle > 0:
                offset = response_body_offset(entry.api_key, entry.api_version, memoryview(frame))
                self._deliver(entry, (frame,), offset, throttle, now)
            else:
                self._send((frame,))

    def _send(self, parts: Parts) -> None:
        self.outbox.send(parts)
        self._close_if_done()
        self.ctx.progress()

    def _write(self, parts: Parts) -> None:
        if self.client is None or self.closed:
            return
        if len(parts) == 1:
            self.client.write(parts[0])
        else:
            self.client.writelines(parts)
        self.last_activity = self.ctx.now()

    # -- the delay queue -----------------------------------------------------------------------
    def _mute_until(self, until: float) -> None:
        if until <= self.muted_until:
            return
        self.muted_until = until
        self._mute(MuteReason.THROTTLED)
        if self._mute_handle is not None:
            self.ctx.delay.cancel(self._mute_handle)
        self._mute_handle = self.ctx.delay.schedule(self, until)

    def on_delay(self, now: float) -> None:
        if self.closed:
            return
        self.outbox.release(now)
        self._close_if_done()
        self.ctx.progress()
        if self.throttled and self.muted_until <= now:
            self._mute_handle = None
            self._unmute(MuteReason.THROTTLED)
            self._guarded(self._pump_requests)

    # -- errors and closing --------------------------------------------------------------------
    def _guarded(self, step: object) -> None:
        """The one top-level guard per connection: a peer's error closes this connection only."""
        try:
            step()  # type: ignore[operator]
        except (ProtocolError, BodyError) as exc:
            self.close("protocol_error", f"bad request from client: {exc}")
        except Exception:
            log.exception("client %s: unexpected error; closing the connection", self.peer)
            self.close("internal_error", None)

    def close(self, reason: str, message: str | None) -> None:
        if self.closed:
            return
        self.closed = True
        if message:
            log.warning("closing client %s on %s: %s", self.peer, self.listener, message)
        if self.throttled:
            self.ctx.observer.muted(-1)
        if self._mute_handle is not None:
            self.ctx.delay.cancel(self._mute_handle)
        if self._connect_task is not None and not self._connect_task.done():
            self._connect_task.cancel()
        if self._held is not None:
            self._held.cancel()
        if self.client is not None:
            self.client.close()
        if self.upstream is not None:
            self.upstream.close()
        self.ctx.sessions.discard(self)
        self.ctx.observer.connection_closed(self.listener, reason)
        self.ctx.progress()

    def upstream_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        detail = f": {exc}" if exc else ""
        if self.in_flight:
            e = self.in_flight[0]
            detail += f" (awaiting the response to {API_NAMES.get(e.api_key, e.api_key)} v{e.api_version})"
        self.close("upstream_closed", f"upstream connection closed{detail}")

    def upstream_backpressure(self, on: bool) -> None:
        """The upstream reads slower than the client sends: stop reading the client meanwhile."""
        if on:
            self._mute(MuteReason.BACKPRESSURE)
        else:
            self._unmute(MuteReason.BACKPRESSURE)

    def begin_shutdown(self) -> None:
        self._mute(MuteReason.CLOSING)

    @property
    def drained(self) -> bool:
        return not self.in_flight and not self.outbox and self._held is None
