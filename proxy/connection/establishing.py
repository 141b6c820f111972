"""A connection's way to OPEN: the upstream connection's deadline and kqp's own login on it.

Part of the connection core (`core.Connection` inherits it; the state it uses is the core's): from
the client's `ClientConnected` until the upstream is ready for the client's requests, which wait
meanwhile (the `CONNECTING` mute blocks them).

* CONNECTING: the core asks for the upstream connection (`ConnectUpstream`) and sets its timer to
  `upstream.connect_timeout_ms` (`SetTimer`): an upstream that does not answer in time closes the
  connection (`upstream_unreachable`), as one that refuses does.
* LOGGING_IN, with `upstream.sasl` on the forwarding connections (`CoreParts.upstream_sasl`; none
  in passthrough, where the client's own SASL frames go upstream): the core sends the sans-io
  login's frames upstream (`upstream_login.py`), reads its answers with its own response decoder
  and sets the timer again. A refusal, a login past the deadline or an upstream that closes
  mid-login closes the connection (`upstream_auth_failed`), logged naming the upstream, the
  mechanism and the user, never the password.
* Then OPEN: the timer is cleared, the `CONNECTING` mute lifted, and what the client sent goes.

While the way is open, the core's handlers for the timer, the upstream's bytes and its loss are the
ones here (mitmproxy's states as handlers: `_on_event` is switched, then switched back), so the
forwarding path never asks whether a login is under way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kqp.protocol.errors import ProtocolError
from kqp.protocol.frames import FrameDecoder
from kqp.protocol.records import BodyError

from . import events as ev
from .events import Action, MuteReason, Send, SetTimer, Side
from .phases import Move
from .upstream_login import UpstreamLogin

if TYPE_CHECKING:
    from .authentication import Authentication
    from .parts import CoreParts

__all__ = ["Establishing"]


class Establishing:
    """The core's handlers from `ClientConnected` to OPEN (a part of `core.Connection`)."""

    # The core's (`core.Connection`), used here.
    parts: CoreParts
    listener: str
    node_id: int | None
    auth: Authentication
    responses: FrameDecoder
    last_activity: float
    _out: list[Action]
    _on_event: dict[type, Callable]
    _login: UpstreamLogin | None
    _deadline: float   # loop time the connection (then the login) must be done by
    _move: Callable[[Move], None]
    _mute: Callable[[MuteReason], None]
    _unmute: Callable[[MuteReason], bool]
    _pump: Callable[[float], None]
    _close: Callable[..., None]
    _timer_fired: Callable[[ev.TimerFired], None]
    _upstream_data: Callable[[ev.UpstreamData], None]
    _upstream_lost: Callable[[ev.UpstreamLost], None]

    def _client_connected(self, e: ev.ClientConnected) -> None:
        if e.user is not None:
            self.auth.adopt(e.user)
        self.last_activity = e.now
        self.parts.charging.observer.connection_opened(self.listener)
        self._mute(MuteReason.CONNECTING)
        self._out.append(ev.ConnectUpstream(self.node_id))
        self._await_upstream(e.now)
        self._on_event[ev.TimerFired] = self._deadline_timer

    def _await_upstream(self, now: float) -> None:
        self._deadline = now + self.parts.settings.connect_timeout_ms / 1000
        self._out.append(SetTimer(self._deadline))

    def _upstream_connected(self, e: ev.UpstreamConnected) -> None:
        sasl = self.parts.upstream_sasl
        if sasl is None:
            self._move(Move.UPSTREAM_UP)
            self._established(e.now)
            return
        self._move(Move.LOGIN_STARTED)
        login = self._login = UpstreamLogin(sasl, e.address)
        self._on_event[ev.UpstreamData] = self._login_data
        self._on_event[ev.UpstreamLost] = self._login_lost
        self._out.append(Send(Side.UPSTREAM, (login.start(),)))
        self._await_upstream(e.now)

    def _upstream_connect_failed(self, e: ev.UpstreamConnectFailed) -> None:
        self._close("upstream_unknown" if e.unknown_broker else "upstream_unreachable", e.message)

    def _deadline_timer(self, e: ev.TimerFired) -> None:
        if e.now < self._deadline:   # woken early: wait for the rest
            self._out.append(SetTimer(self._deadline))
            return
        ms = self.parts.settings.connect_timeout_ms
        if self._login is None:
            self._close("upstream_unreachable", f"no upstream connection within {ms} ms")
            return
        raise self._login.failed(f"no answer within {ms} ms")   # the core closes: upstream_auth_failed

    def _login_data(self, e: ev.UpstreamData) -> None:
        login = self._login
        assert login is not None
        try:
            self.responses.feed(e.data)
            while not login.done and (frame := self.responses.next_frame()) is not None:
                if (request := login.receive(frame)) is not None:
                    self._out.append(Send(Side.UPSTREAM, (request,)))
        except (ProtocolError, BodyError) as exc:
            self._close("upstream_protocol_error", f"bad frame from upstream during kqp's login: {exc}")
            return
        if login.done:   # the upstream sends nothing unasked: no response is left over
            self._move(Move.LOGGED_IN)
            self._established(e.now)

    def _login_lost(self, e: ev.UpstreamLost) -> None:
        assert self._login is not None
        raise self._login.failed(f"the upstream closed the connection{f': {e.message}' if e.message else ''}")

    def _established(self, now: float) -> None:
        """The upstream is ready: the core's own handlers again, and what the client sent goes."""
        self._login = None
        handlers = self._on_event
        handlers[ev.TimerFired] = self._timer_fired
        handlers[ev.UpstreamData] = self._upstream_data
        handlers[ev.UpstreamLost] = self._upstream_lost
        self._out.append(SetTimer(None))
        self._unmute(MuteReason.CONNECTING)
        self._pump(now)
