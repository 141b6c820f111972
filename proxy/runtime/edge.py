"""The asyncio edge of a connection: transport callbacks in, the core's actions carried out.

`ClientEdge` is the `asyncio.BufferedProtocol` of a client socket and owns the upstream socket
(`UpstreamEdge`): each read lands where the core's reader for its direction says
(`kqp.protocol.frames`), and the core hears how many bytes it brought, each callback as one event
stamped with the loop's time. The actions it returns are carried out in order, an event's writes to
one side in one call; once they are done each side's `FlowControl` (flow_control.py) pauses or
resumes its transport as the core's mute reasons say (the `Mute` and `Unmute` actions only say why).
Events raised while actions run (a write crossing the high-water mark, an effect answered at once)
are queued, so the core never sees re-entry. Effects: `ConnectUpstream` opens the upstream socket,
`LookUpTopics`, `CommitQuotas` and `CommitAcls` run as tasks of this connection, `EnsureListeners`
binds at once; a task that fails closes this connection only. TLS identity, admission (`limits:`)
and a PROXY header's real peer come from the listener and `EdgeWiring`, whose loop a test replaces
with a fake one (`tests/proxy/test_edge.py`)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from kqp.config.model import HostPort
from kqp.protocol.addresses import BrokerAddress
from kqp.protocol.errors import ProtocolError
from kqp.protocol.frames import FrameReader
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import Send, Side
from kqp.proxy.connection.wiring import CoreWiring
from kqp.proxy.runtime.state.quota_store import CommitFailed
from kqp.proxy.tls.peers import Refusal, Refused
from kqp.quotas.acls.admin_layer import AclChange
from kqp.quotas.admin_layer import Change

from .admission import Admission, Slot, peer_ip, peer_name
from .cert_reload import no_tls
from .delay import DelayDriver
from .flow_control import FlowControl
from .socket_probe import peer_gone, unread_bytes

log = logging.getLogger("kqp.connection")

WRITE_HIGH_WATER = 1024 * 1024
# Under backpressure a write is queued, holding what it names: a part smaller than this is queued as
# a copy, so that a slow peer never keeps a whole shared read arena alive for a small frame.
COPY_QUEUED_BELOW = 64 * 1024
# On every event: a member looked up on its Enum class is a Python call in 3.11.
CLIENT, UPSTREAM = Side.CLIENT, Side.UPSTREAM


@dataclass(frozen=True)
class EdgeWiring:
    """What every client connection's edge uses, built once where the server is assembled."""

    loop: asyncio.AbstractEventLoop
    core: CoreWiring
    delay: DelayDriver
    upstream_for: Callable[[int | None], Sequence[HostPort]]   # where a listener's connections go, in order
    look_up_topics: Callable[[], Awaitable[None]]
    ensure_listeners: Callable[[tuple[BrokerAddress, ...]], str | None]   # bound and recorded; or what failed
    open_connections: set[ClientEdge]                        # for the idle reaper and shutdown
    on_closed: Callable[[], None]    # a connection closed (shutdown waits for the open set to empty)
    identify: Callable[[bytes | None], str] | None = None    # TLS listeners: peer certificate (DER) -> user
    refused: Callable[[str, str, Refusal], None] | None = None   # (listener, peer, why): counted and logged
    upstream_tls: Callable[[str], dict[str, object]] = no_tls    # upstream host -> create_connection's TLS args
    admission: Admission | None = None          # limits: connection counts and creation rates
    # admin.manage_quotas: (changes, who) -> written (off the loop) and in force, or CommitFailed
    commit_quotas: Callable[[tuple[Change, ...], str], Awaitable[None]] | None = None
    # authorization.state_file: the same for ACL changes
    commit_acls: Callable[[tuple[AclChange, ...], str], Awaitable[None]] | None = None


class FrameReads(asyncio.BufferedProtocol):
    """What both sockets of a connection share: a read lands where the core's reader for its
    direction (`reads`, protocol/frames.py) says; `buffer_updated` tells the core how much came.

    `get_buffer` is the reader's own method, set on each instance: a transport takes it once, when
    the protocol is set (uvloop; asyncio looks it up per read), so each read calls the reader (compiled
    with the request path) with no Python frame of the edge's in between."""

    __slots__ = ()
    reads: FrameReader


class ClientEdge(FrameReads):
    """One client connection: its socket, its upstream socket, its core."""

    def __init__(self, wiring: EdgeWiring, listener: str, node_id: int | None, slot: Slot | None = None,
                 real_peer: object = None) -> None:
        self.w = wiring
        self.slot = slot   # admitted by a TLS listener already; else admitted in connection_made
        self.real_peer = real_peer   # the client a load balancer's PROXY header named; None: the socket's peer
        self.core = Connection(wiring.core, listener, node_id)
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self._flow = {CLIENT: FlowControl(), UPSTREAM: FlowControl()}
        self._timer: object | None = None
        self._unread_mark: int | None = None   # the client's unread bytes at the last NoteUnread
        self._tasks: set[asyncio.Task[None]] = set()
        self._running = False
        self._mutes_said = False   # a Mute or Unmute among the actions since reading was last synced
        self._refused = False
        self._pending: deque[ev.Event] = deque()
        self.reads = self.core.requests
        self.get_buffer = self.reads.get_buffer   # type: ignore[method-assign]  # see FrameReads
        self.clock = wiring.loop.time   # the loop's time, which stamps every event
        self._writes: dict[Side, list[object]] = {CLIENT: [], UPSTREAM: []}   # this event's, per side
        self._unsent = False   # whether `_writes` holds any

    # -- running the core ----------------------------------------------------------------------
    def run(self, event: ev.Event) -> None:
        if self._refused:
            return
        if self._running:
            self._pending.append(event)
            return
        self._running = True
        do, writes = _DO, self._writes
        try:
            while True:
                for action in self.core.handle(event):
                    if type(action) is Send:   # most actions: carried out here, not through a call
                        writes[action.side].extend(action.parts)
                        self._unsent = True
                    else:
                        do[type(action)](self, action)
                if self._unsent:   # most events of a connection's life send nothing
                    self._write()
                if not self._pending:
                    break
                event = self._pending.popleft()
            if self._mutes_said:   # no reason came or went: each side reads as it did
                self._sync_reading()
        except Exception:
            # A bug in carrying out an action: this connection only, and loudly.
            log.exception("client %s: unexpected error in the connection's edge; closing it", self.core.peer)
            self.core.handle(ev.CloseRequested(self.clock(), "internal_error"))
            self._close(ev.Close("internal_error"))
        finally:
            self._running = False

    def _sync_reading(self) -> None:
        """Pause or resume each side as the core's mute reasons now say (a closing one is left alone)."""
        self._mutes_said = False
        core = self.core
        if core.closed:
            return
        flow = self._flow
        flow[CLIENT].sync(not core.muted(CLIENT))
        flow[UPSTREAM].sync(not core.muted(UPSTREAM))

    # -- client transport callbacks --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio subclasses
        self._flow[CLIENT].attach(self.client)  # type: ignore[arg-type]
        peer = transport.get_extra_info("peername")
        self.core.peer = peer_name(peer)
        if self.real_peer is not None:   # behind a balancer: the client is who its header says
            self.core.peer = f"{peer_name(self.real_peer)} via {self.core.peer}"
            peer = self.real_peer
        if self.slot is None and self.w.admission is not None:
            # admit() is synchronous: nothing can be read before it answers, so only a refused
            # connection is paused (held unread for its throttle, or already closing).
            self.slot = self.w.admission.admit(self.core.listener, peer, transport.close)
            if self.slot is None:
                self._refused = True   # counted, logged and closed (or held for its throttle) by admission
                if not transport.is_closing():
                    transport.pause_reading()  # type: ignore[attr-defined]
                return
        user = None
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None and self.w.identify is not None:
            try:
                user = self.w.identify(ssl_object.getpeercert(binary_form=True))
            except Refused as exc:
                self._refuse(exc.refusal)
                return
        self.client.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.w.open_connections.add(self)
        self.run(ev.ClientConnected(self.clock(), user, peer_ip(peer)))

    def _refuse(self, refusal: Refusal) -> None:
        """Close a client the core never hears of: nothing is owed to it, and it never counted as open."""
        self._refused = True
        if self.w.refused is not None:
            self.w.refused(self.core.listener, self.core.peer, refusal)
        assert self.client is not None
        self.client.close()

    def buffer_updated(self, nbytes: int) -> None:
        """A read put `nbytes` where the core's reader said (`get_buffer`); the core hears of it unless
        it lies inside an incomplete frame, where nothing comes of it yet (`took`)."""
        if self.reads.took(nbytes):
            return
        self.run(ev.ClientData(self.clock(), nbytes))
        self.core.keep_held()   # what waits in the core leaves the shared arena

    def data_received(self, data: bytes) -> None:
        """What a transport without buffered reads hands over."""
        self.run(ev.ClientData(self.clock(), data))
        self.core.keep_held()

    def eof_received(self) -> bool:
        # A frame the client cut short is in the core's reader: the core says so.
        self.run(ev.ClientEof(self.clock()))
        return True   # keep the socket half-open: owed responses still go out

    def connection_lost(self, exc: Exception | None) -> None:
        if self.slot is not None:
            self.slot.release()
        self.run(ev.ClientLost(self.clock()))

    def pause_writing(self) -> None:
        self.run(ev.WriteBuffer(self.clock(), CLIENT, True))

    def resume_writing(self) -> None:
        self.run(ev.WriteBuffer(self.clock(), CLIENT, False))

    def on_delay(self, now: float) -> None:
        """The delay queue's callback (`DelayDriver`): this connection's timer is due."""
        self._timer = None
        # What the muted socket holds, unread (socket_probe.py): the back-off probe and the give-up rule.
        unread, mark = unread_bytes(self.client), self._unread_mark
        self.run(ev.TimerFired(now, None if unread is None or mark is None else max(0, unread - mark),
                               peer_gone(self.client)))

    # -- actions ---------------------------------------------------------------------------------
    def _spawn(self, work: Coroutine[object, object, None]) -> None:
        task = self.w.loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._effect_done)

    def _effect_done(self, task: asyncio.Task[None]) -> None:
        """An effect's task ended: one that failed unexpectedly closes this connection only, loudly."""
        self._tasks.discard(task)
        if task.cancelled() or (exc := task.exception()) is None:
            return
        log.error("client %s: unexpected error in an effect of the connection; closing it", self.core.peer,
                  exc_info=exc)
        self.run(ev.CloseRequested(self.clock(), "internal_error"))

    def _connect_upstream(self, action: ev.ConnectUpstream) -> None:
        self._spawn(self._connect(action.node_id))

    def _note_unread(self, _action: ev.NoteUnread) -> None:
        self._unread_mark = unread_bytes(self.client)

    def _look_up(self, _action: ev.LookUpTopics) -> None:
        self._spawn(self._look_up_topics())

    def _commit_quotas(self, action: ev.CommitQuotas) -> None:
        self._spawn(self._commit(self.w.commit_quotas, action))

    def _commit_acls(self, action: ev.CommitAcls) -> None:
        self._spawn(self._commit(self.w.commit_acls, action))

    async def _connect(self, node_id: int | None) -> None:
        """The upstream socket, its callbacks on `UpstreamEdge`; no deadline here: the core's timer
        closes the connection (and so cancels this) when `upstream.connect_timeout_ms` has passed.
        Each target in turn (several only for bootstrap) until one accepts."""
        targets = self.w.upstream_for(node_id)
        if not targets:
            self.run(ev.UpstreamConnectFailed(self.clock(), f"kqp knows no upstream address for broker {node_id}",
                                              unknown_broker=True))
            return
        failures: list[str] = []
        for target in targets:
            try:
                transport, _ = await self.w.loop.create_connection(
                    lambda: UpstreamEdge(self), target.host, target.port,
                    **self.w.upstream_tls(target.host))  # type: ignore[arg-type]
                break
            except (OSError, ProtocolError) as exc:   # a refusal, a TLS failure (ssl.SSLError is an OSError)
                failures.append(f"upstream {target} unreachable: {exc or type(exc).__name__}")
        else:
            self.run(ev.UpstreamConnectFailed(self.clock(), "; ".join(failures)))
            return
        if self.core.closed:
            transport.close()
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[attr-defined]
        self.upstream = transport  # type: ignore[assignment]
        self._flow[UPSTREAM].attach(transport)  # type: ignore[arg-type]
        self.run(ev.UpstreamConnected(self.clock(), str(target)))

    def _write(self) -> None:
        """The event's writes, each side's in one call (one system call for several frames)."""
        self._unsent = False
        for side, parts in self._writes.items():
            if not parts:
                continue
            transport = self.client if side is CLIENT else self.upstream
            self._writes[side] = []
            if transport is None or transport.is_closing():
                continue
            if transport.get_write_buffer_size():   # it will be queued: small parts as copies (see above)
                parts = [bytes(part) if len(part) < COPY_QUEUED_BELOW else part for part in parts]  # type: ignore[arg-type]
            if len(parts) == 1:
                transport.write(parts[0])  # type: ignore[arg-type]
            else:
                transport.writelines(parts)  # type: ignore[arg-type]

    def _set_timer(self, action: ev.SetTimer) -> None:
        if self._timer is not None:
            self.w.delay.cancel(self._timer)
            self._timer = None
        if action.at is not None:
            self._timer = self.w.delay.schedule(self, action.at)

    async def _look_up_topics(self) -> None:
        await self.w.look_up_topics()
        self.run(ev.TopicsLookedUp(self.clock()))

    def _ensure_listeners(self, action: ev.EnsureListeners) -> None:
        # Answered at once: the event is queued and handled right after this one's actions.
        self.run(ev.ListenersReady(self.clock(), self.w.ensure_listeners(action.brokers)))

    async def _commit(self, commit: Callable[[Any, str], Awaitable[None]] | None,
                      action: ev.CommitQuotas | ev.CommitAcls) -> None:
        assert commit is not None, f"{type(action).__name__} comes only from an admin policy with a state file"
        try:
            await commit(action.changes, action.who)
        except CommitFailed as failed:
            self.run(ev.Committed(self.clock(), str(failed)))
            return
        self.run(ev.Committed(self.clock()))

    def _close(self, action: ev.Close) -> None:
        self._write()   # what the core sent before closing goes first
        if action.message:
            log.warning("closing client %s on %s: %s", self.core.peer, self.core.listener, action.message)
        if self._timer is not None:
            self.w.delay.cancel(self._timer)
            self._timer = None
        for task in list(self._tasks):
            task.cancel()
        for transport in (self.client, self.upstream):
            if transport is not None:
                transport.close()
        self.w.open_connections.discard(self)
        self.w.on_closed()


class UpstreamEdge(FrameReads):
    """The upstream socket of a connection: its callbacks become the client edge's events (kqp's
    own login on it included: the core reads its answers)."""

    __slots__ = ("edge", "get_buffer", "reads")

    def __init__(self, edge: ClientEdge) -> None:
        self.edge = edge
        self.reads = edge.core.responses
        self.get_buffer = self.reads.get_buffer   # type: ignore[method-assign]  # see FrameReads

    def buffer_updated(self, nbytes: int) -> None:   # as the client's
        if self.reads.took(nbytes):
            return
        edge = self.edge
        edge.run(ev.UpstreamData(edge.clock(), nbytes))
        edge.core.keep_held()

    def data_received(self, data: bytes) -> None:
        edge = self.edge
        edge.run(ev.UpstreamData(edge.clock(), data))
        edge.core.keep_held()

    def connection_lost(self, exc: Exception | None) -> None:
        self.edge.run(ev.UpstreamLost(self.edge.clock(), str(exc) if exc else None))

    def pause_writing(self) -> None:          # the upstream reads slower than the client sends
        self.edge.run(ev.WriteBuffer(self.edge.clock(), UPSTREAM, True))

    def resume_writing(self) -> None:
        self.edge.run(ev.WriteBuffer(self.edge.clock(), UPSTREAM, False))


def _said(edge: ClientEdge, _action: object) -> None:
    """A `Mute` or `Unmute`: the core has the reason already, and reading is synced to it once the
    event's actions are done (`FlowControl` reads it from there)."""
    edge._mutes_said = True


# How the edge carries out each action: one table for every connection (a table of bound methods per
# connection was a reference cycle, left to the cyclic collector at every close).
_DO: dict[type, Callable[[ClientEdge, Any], None]] = {
    ev.ConnectUpstream: ClientEdge._connect_upstream,
    ev.Mute: _said,     # the core keeps the reasons: `_sync_reading` reads them after an event that changed one
    ev.Unmute: _said,
    ev.SetTimer: ClientEdge._set_timer,
    ev.NoteUnread: ClientEdge._note_unread,
    ev.LookUpTopics: ClientEdge._look_up,
    ev.EnsureListeners: ClientEdge._ensure_listeners,
    ev.CommitQuotas: ClientEdge._commit_quotas,
    ev.CommitAcls: ClientEdge._commit_acls,
    ev.Close: ClientEdge._close,
}
