"""What a connection waits for from the runtime: effects asked as actions, answered by events.

Part of the connection core (`core.Connection` inherits it; the state it uses is the core's). The
core does no I/O, so whatever needs some is an action the edge carries out and answers with an
event, and the request or response it is for waits meanwhile, in order (mitmproxy's commands):

* A topic lookup (`LookUpTopics` -> `TopicsLookedUp`): a mutation request whose topics the cache
  does not know is held, unplanned, and the client is read no more (`LOOKUP`) until the lookup is
  done; then it is planned again.
* A quota commit (`CommitQuotas` -> `QuotasCommitted`): an AlterClientQuotas that changes something
  (the quota admin policy's `PendingCommit`) waits in its FIFO turn, unanswered, while the runtime
  writes the state file off the event loop and puts the change in force; the answer is built from
  the event (a failed commit: UNKNOWN_SERVER_ERROR "not changed: ..." for the entries that were to
  apply). No request after it is read meanwhile (`COMMIT`), so no upstream answer can overtake it.
* Listeners (`EnsureListeners` -> `ListenersReady`): a response that names a broker kqp has no
  listener for (`CoreParts.listener_for` says None: new, or at a new address) is held, unrewritten,
  and the upstream is read no more (`LISTENERS`): what follows it in the stream waits behind it, so
  the client's order holds. Once kqp listens for every broker it names, its addresses are rewritten
  to kqp's and it goes on. A broker kqp could not listen for closes the connection
  (`listener_unavailable`), the response undelivered: kqp never hands a client an upstream address
  (that would bypass its quotas) nor a port it does not serve; the client reconnects and asks
  again, which tries the listener again. The common case, every named broker known, asks nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from kqp.protocol.addresses import BrokerAddress, rewrite_addresses_parts
from kqp.protocol.errors import ProtocolError
from kqp.protocol.frames import FrameDecoder
from kqp.protocol.parts import joined
from kqp.protocol.records import BodyError
from kqp.proxy.policies.quota_admin import PendingCommit

from . import events as ev
from .events import Action, MuteReason, Parts
from .exchange import InFlight
from .phases import Phase

if TYPE_CHECKING:
    from collections import deque

    from .parts import CoreParts

__all__ = ["Awaiting", "ResponseHeld"]

NO_CAP = float("inf")


class ResponseHeld(Exception):
    """The response just read waits for listeners: the core stops reading responses (raised out of
    its reading loop, so that loop asks nothing on the fast path)."""


class Awaiting:
    """The core's waits on the runtime (a part of `core.Connection`)."""

    # The core's (`core.Connection`), used here.
    parts: CoreParts
    phase: Phase
    in_flight: deque[InFlight]
    _out: list[Action]
    _held: Parts | None                                  # a request waiting for a topic lookup
    _committing: tuple[InFlight, PendingCommit] | None   # an answer waiting for the state file
    _held_response: tuple[memoryview, Parts] | None      # a response waiting for listeners
    _missing: list[BrokerAddress]                        # brokers the address walk found no listener for
    _mute: Callable[[MuteReason], None]
    _unmute: Callable[[MuteReason], bool]
    _pump: Callable[[float], None]
    _close: Callable[..., None]
    _flush_local: Callable[[float], None]
    _on_request: Callable[..., None]
    _on_response: Callable[..., None]
    _on_event: dict[type, Callable]
    responses: FrameDecoder
    _upstream_data: Callable[[ev.UpstreamData], None]

    # -- a topic lookup --------------------------------------------------------------------------
    def _hold(self, parts: Parts) -> None:
        """Look topics up before planning this request again, reading nothing more meanwhile: the
        connection's order is kept."""
        self._held = parts
        self._mute(MuteReason.LOOKUP)
        self._out.append(ev.LookUpTopics())

    def _topics_looked_up(self, e: ev.TopicsLookedUp) -> None:
        parts, self._held = self._held, None
        if parts is not None:
            self._on_request(joined(parts), parts, e.now, looked_up=True)
        self._unmute(MuteReason.LOOKUP)
        self._pump(e.now)

    # -- a quota commit --------------------------------------------------------------------------
    def _await_commit(self, entry: InFlight, pending: PendingCommit) -> None:
        entry.local_response = None   # no answer yet: the FIFO stops at it
        self._committing = (entry, pending)
        self._mute(MuteReason.COMMIT)
        self._out.append(ev.CommitQuotas(pending.changes, pending.who))

    def _quotas_committed(self, e: ev.QuotasCommitted) -> None:
        if self._committing is None:
            return
        (entry, pending), self._committing = self._committing, None
        entry.local_response = pending.answer(e.error)
        self._flush_local(e.now)
        if self.phase is Phase.CLOSED:
            return
        self._unmute(MuteReason.COMMIT)
        if len(self.in_flight) < (self.parts.settings.max_in_flight or NO_CAP):
            self._unmute(MuteReason.IN_FLIGHT)
        self._pump(e.now)

    # -- listeners for the brokers a response names --------------------------------------------
    def _listener_or_note(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """The address walk's mapper: kqp's listener for the broker, or the broker noted as missing."""
        mapped = self.parts.listener_for(node_id, host, port)
        if mapped is None:
            self._missing.append(BrokerAddress(node_id, host, port))
            return host, port
        return mapped

    def _kqps_addresses(self, entry: InFlight, head: memoryview, frame: Parts, body_offset: int,
                        counted: bool) -> Parts:
        """The response with every broker address kqp's; raises `ResponseHeld` when kqp has no listener
        for one yet (asked for with `EnsureListeners`). `counted`: its records were counted on the
        first walk (Fetch v16+, when the handler asked), the walk after the wait counts none."""
        rewritten, _ = rewrite_addresses_parts(entry.api_key, entry.api_version, frame, body_offset,
                                               self._listener_or_note, None if counted else entry.counts)
        if self._missing:
            brokers, self._missing = _unique(self._missing), []
            if counted:   # asked, answered without an error, and still none (moved again meanwhile)
                self._close("listener_unavailable", f"kqp has no listener for {', '.join(map(_named, brokers))}")
                raise ResponseHeld
            self.in_flight.appendleft(entry)
            self._held_response = (head, frame)
            self._on_event[ev.UpstreamData] = self._buffer_responses
            self._mute(MuteReason.LISTENERS)
            self._out.append(ev.EnsureListeners(brokers))
            raise ResponseHeld
        return frame if rewritten is None else rewritten

    def _buffer_responses(self, e: ev.UpstreamData) -> None:
        """Bytes that arrive while a response waits for listeners (read before the mute took hold)."""
        try:
            self.responses.feed(e.data)
        except ProtocolError as exc:
            self._close("upstream_protocol_error", f"bad frame from upstream: {exc}")

    def _listeners_ready(self, e: ev.ListenersReady) -> None:
        held, self._held_response = self._held_response, None
        if held is None:
            return
        if e.error is not None:
            self._close("listener_unavailable", f"a response names a broker kqp cannot listen for: {e.error}")
            return
        self._on_event[ev.UpstreamData] = self._upstream_data
        self._unmute(MuteReason.LISTENERS)
        try:
            self._on_response(*held, e.now, counted=True)
        except ResponseHeld:   # closed: still no listener
            return
        except (ProtocolError, BodyError) as exc:   # as `_upstream_data` (read once already: not expected)
            self._close("upstream_protocol_error", f"bad frame from upstream: {exc}")
            return
        self._upstream_data(ev.UpstreamData(e.now, b""))   # no new bytes: read on what waited behind it


def _unique(brokers: Iterable[BrokerAddress]) -> tuple[BrokerAddress, ...]:
    return tuple(dict.fromkeys(brokers))


def _named(broker: BrokerAddress) -> str:
    return f"broker {broker.node_id} ({broker.host}:{broker.port})"
