"""A connection's way to OPEN: the upstream connection's deadline and kqp's own login on it.

A part of the connection core (`core.Connection` owns one and routes events to it until the
upstream is ready; the client's requests wait meanwhile under the `CONNECTING` mute). CONNECTING:
it asks for the upstream connection (`ConnectUpstream`) within `upstream.connect_timeout_ms`
(`upstream_unreachable` when it passes). LOGGING_IN, with `upstream.sasl` on the forwarding
connections (none in passthrough): it sends the sans-io login's frames (`upstream_login.py`), reads
the answers with the core's response reader and sets the deadline again; a refusal, a login past
the deadline or an upstream that closes mid-login raises `UpstreamAuthError`, which the core turns
into `upstream_auth_failed`, logged with the upstream, the mechanism and the user.
"""

from __future__ import annotations

from kqp.protocol.frames import FrameReader
from kqp.proxy.connection.wiring import CoreWiring

from . import events as ev
from .events import Send, SetTimer, Side
from .host import Host
from .phases import Move
from .upstream_login import UpstreamLogin

__all__ = ["Establishing"]


class Establishing:
    """From `ClientConnected` to OPEN; the core asks `done` after each event it hands over."""

    __slots__ = ("_deadline", "_host", "_login", "_responses", "_wiring", "node_id")

    def __init__(self, host: Host, wiring: CoreWiring, node_id: int | None, responses: FrameReader) -> None:
        self._host, self._wiring, self.node_id, self._responses = host, wiring, node_id, responses
        self._login: UpstreamLogin | None = None
        self._deadline = 0.0   # loop time the connection (then the login) must be done by

    def start(self, now: float) -> None:
        self._host.emit(ev.ConnectUpstream(self.node_id))
        self._arm(now)

    def _arm(self, now: float) -> None:
        self._deadline = now + self._wiring.settings.connect_timeout_ms / 1000
        self._host.emit(SetTimer(self._deadline))

    def upstream_connected(self, e: ev.UpstreamConnected) -> Move:
        """`UPSTREAM_UP`: open now; `LOGIN_STARTED`: kqp logs in first."""
        sasl = self._wiring.upstream_sasl
        if sasl is None:
            return Move.UPSTREAM_UP
        login = self._login = UpstreamLogin(sasl, e.address)
        self._host.emit(Send(Side.UPSTREAM, (login.start(),)))
        self._arm(e.now)
        return Move.LOGIN_STARTED

    def timer_fired(self, e: ev.TimerFired) -> None:
        if e.now < self._deadline:   # woken early: wait for the rest
            self._host.emit(SetTimer(self._deadline))
            return
        ms = self._wiring.settings.connect_timeout_ms
        if self._login is None:
            self._host.close("upstream_unreachable", f"no upstream connection within {ms} ms")
            return
        raise self._login.failed(f"no answer within {ms} ms")

    def login_data(self, e: ev.UpstreamData) -> bool:
        """The login's answers; True once logged in (the upstream sends nothing unasked, so no
        response is left over)."""
        login = self._login
        assert login is not None, "upstream bytes before kqp's login began"
        self._responses.received(e.data)
        while not login.done and (frame := self._responses.next_frame()) is not None:
            if (request := login.receive(frame)) is not None:
                self._host.emit(Send(Side.UPSTREAM, (request,)))
        return login.done

    def login_lost(self, e: ev.UpstreamLost) -> None:
        assert self._login is not None
        raise self._login.failed(f"the upstream closed the connection{f': {e.message}' if e.message else ''}")
