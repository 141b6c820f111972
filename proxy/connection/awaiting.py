"""What a connection waits for from the runtime: effects asked as actions, answered by events.

A part of the connection core, which does no I/O: whatever needs some is an action the edge carries
out and answers with an event, and what it is for waits meanwhile, in order (mitmproxy's commands).
A topic lookup (`LookUpTopics` -> `TopicsLookedUp`): a request whose topics the cache does not know
is held unplanned, no request read (`LOOKUP`). A commit (`CommitQuotas`, `CommitAcls` -> `Committed`):
an AlterClientQuotas, CreateAcls or DeleteAcls answer waits in its FIFO turn while its state file
is written, no request read (`COMMIT`). Listeners (`EnsureListeners` -> `ListenersReady`): a
response naming a broker kqp has no listener for (`CoreWiring.listener_for` says None) is held
unrewritten and the upstream is read no more (`LISTENERS`); a broker kqp cannot listen for closes
the connection (`listener_unavailable`), since handing out the upstream's own address would bypass
kqp. The core resumes what waited.
"""

from __future__ import annotations

from kqp.protocol.addresses import BrokerAddress, rewrite_addresses_parts
from kqp.proxy.connection.wiring import CoreWiring
from kqp.proxy.policies.pending import Pending, PendingAclCommit

from . import events as ev
from .events import MuteReason, Parts
from .host import Host
from .plans import Flight

__all__ = ["Awaiting", "ResponseHeld"]


class ResponseHeld(Exception):
    """The response just read waits for listeners (or closed the connection): the core stops reading
    responses. Raised out of its reading loop, so that loop asks nothing on the fast path."""


class Awaiting:
    """The connection's waits on the runtime; at most one of each at a time, since each stops reading."""

    __slots__ = ("_committing", "_host", "_missing", "_wiring", "held_request", "held_response")

    def __init__(self, host: Host, wiring: CoreWiring) -> None:
        self._host, self._wiring = host, wiring
        self.held_request: Parts | None = None                  # a request waiting for a topic lookup
        self.held_response: tuple[Flight, memoryview, Parts] | None = None   # a response waiting for listeners
        self._committing: tuple[Flight, Pending] | None = None   # an answer waiting for its commit
        self._missing: list[BrokerAddress] = []                 # brokers the address walk found no listener for

    # -- a topic lookup --------------------------------------------------------------------------
    def look_up(self, request: Parts) -> None:
        self.held_request = request
        self._host.mute(MuteReason.LOOKUP)
        self._host.emit(ev.LookUpTopics())

    def looked_up(self) -> Parts | None:
        """The request to plan again now that the lookup is done (None: it was dropped meanwhile)."""
        request, self.held_request = self.held_request, None
        return request

    # -- a commit to a state file --------------------------------------------------------------------------
    def commit(self, flight: Flight, pending: Pending) -> None:
        flight.progress.answer = None   # no answer yet: the FIFO stops at it
        self._committing = (flight, pending)
        self._host.mute(MuteReason.COMMIT)
        commit = ev.CommitAcls if isinstance(pending, PendingAclCommit) else ev.CommitQuotas
        self._host.emit(commit(pending.changes, pending.who))

    def committed(self, e: ev.Committed) -> bool:
        """The commit's outcome is the waiting answer; False when nothing waited."""
        if self._committing is None:
            return False
        (flight, pending), self._committing = self._committing, None
        flight.progress.answer = pending.answer(e.error)
        return True

    # -- listeners for the brokers a response names --------------------------------------------
    def _listener_or_note(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """The address walk's mapper: kqp's listener for the broker, or the broker noted as missing."""
        mapped = self._wiring.listener_for(node_id, host, port)
        if mapped is None:
            self._missing.append(BrokerAddress(node_id, host, port))
            return host, port
        return mapped

    def kqps_addresses(self, flight: Flight, head: memoryview, frame: Parts, body_offset: int,
                       counted: bool) -> Parts:
        """The response with every broker address kqp's; raises `ResponseHeld` when kqp has no listener
        for one yet (asked for with `EnsureListeners`). `counted`: it waited already, its records were
        counted on the first walk (Fetch v16+, when its plan asked), so this walk counts none."""
        rewritten, _ = rewrite_addresses_parts(flight.api_key, flight.api_version, frame, body_offset,
                                               self._listener_or_note, None if counted else flight.progress.counts)
        if not self._missing:
            return frame if rewritten is None else rewritten
        brokers, self._missing = tuple(dict.fromkeys(self._missing)), []
        if counted:   # asked, answered without an error, and still none (moved again meanwhile)
            self._host.close("listener_unavailable", f"kqp has no listener for {', '.join(map(_named, brokers))}")
        else:
            self.held_response = (flight, head, frame)
            self._host.mute(MuteReason.LISTENERS)
            self._host.emit(ev.EnsureListeners(brokers))
        raise ResponseHeld

    def listeners_ready(self, e: ev.ListenersReady) -> tuple[Flight, memoryview, Parts] | None:
        """The response to deliver now that its listeners are ready (None: nothing waited, or closed)."""
        held, self.held_response = self.held_response, None
        if held is not None and e.error is not None:
            self._host.close("listener_unavailable", f"a response names a broker kqp cannot listen for: {e.error}")
            return None
        return held


def _named(broker: BrokerAddress) -> str:
    return f"broker {broker.node_id} ({broker.host}:{broker.port})"
