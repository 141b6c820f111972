"""A connection's life as explicit phases and a table of the moves between them (h11's way).

    CONNECTING --upstream up--> OPEN --client EOF / shutdown--> DRAINING --nothing owed--> CLOSED
         \\--upstream up, login--> LOGGING_IN --logged in--> OPEN
    CONNECTING, LOGGING_IN --client EOF / shutdown--> DRAINING      (any phase --close--> CLOSED)

* CONNECTING: the client is in; the upstream connection is being opened. Requests that arrive are
  read but wait (the `CONNECTING` mute blocks them).
* LOGGING_IN: the upstream connection is up and kqp logs in on it with `upstream.sasl`
  (`upstream_login.py`, driven by the core); requests still wait, as while connecting.
* OPEN: requests are read, forwarded and answered.
* DRAINING: no new request will be read (the client half-closed, or the process is shutting
  down), but what is owed still goes out; the core closes itself once nothing is owed. A client
  that half-closed before the upstream was up (or logged in) drains too: the requests it sent go
  once it is.
* CLOSED: both sockets are to be closed; the connection takes no event any more.

A move the table does not list is kqp's own bug (an upstream reported up twice, a client that
connects again) and raises `IllegalTransition`, which the core's one guard turns into a close
with `internal_error`. Staying in DRAINING on a second reason to drain is a move the table lists.
"""

from __future__ import annotations

import enum

__all__ = ["IllegalTransition", "Move", "Phase", "next_phase"]


class Phase(enum.Enum):
    CONNECTING = "connecting"
    LOGGING_IN = "logging_in"   # kqp's own SASL login on the upstream connection
    OPEN = "open"
    DRAINING = "draining"
    CLOSED = "closed"


class Move(enum.Enum):
    """What moves a connection from one phase to the next."""

    UPSTREAM_UP = "the upstream connection is up"
    LOGIN_STARTED = "the upstream connection is up and kqp logs in on it"
    LOGGED_IN = "kqp's upstream login succeeded"
    CLIENT_EOF = "the client half-closed"
    SHUTDOWN = "the process began shutting down"
    CLOSE = "the connection closes"


class IllegalTransition(RuntimeError):
    """A move the table does not allow: a bug in kqp, never a peer's doing."""


_TRANSITIONS: dict[tuple[Phase, Move], Phase] = {
    (Phase.CONNECTING, Move.UPSTREAM_UP): Phase.OPEN,
    (Phase.CONNECTING, Move.LOGIN_STARTED): Phase.LOGGING_IN,
    (Phase.CONNECTING, Move.CLIENT_EOF): Phase.DRAINING,
    (Phase.CONNECTING, Move.SHUTDOWN): Phase.DRAINING,
    (Phase.LOGGING_IN, Move.LOGGED_IN): Phase.OPEN,
    (Phase.LOGGING_IN, Move.CLIENT_EOF): Phase.DRAINING,
    (Phase.LOGGING_IN, Move.SHUTDOWN): Phase.DRAINING,
    (Phase.OPEN, Move.CLIENT_EOF): Phase.DRAINING,
    (Phase.OPEN, Move.SHUTDOWN): Phase.DRAINING,
    # The client half-closed before the upstream was up (or logged in): what it sent goes once it is.
    (Phase.DRAINING, Move.UPSTREAM_UP): Phase.DRAINING,
    (Phase.DRAINING, Move.LOGIN_STARTED): Phase.DRAINING,
    (Phase.DRAINING, Move.LOGGED_IN): Phase.DRAINING,
    (Phase.DRAINING, Move.CLIENT_EOF): Phase.DRAINING,
    (Phase.DRAINING, Move.SHUTDOWN): Phase.DRAINING,
    **{(phase, Move.CLOSE): Phase.CLOSED for phase in Phase if phase is not Phase.CLOSED},
}


def next_phase(phase: Phase, move: Move) -> Phase:
    """The phase `move` leads to from `phase`; raises `IllegalTransition` for a move not in the table."""
    try:
        return _TRANSITIONS[(phase, move)]
    except KeyError:
        raise IllegalTransition(f"{move.name} ({move.value}) is not a move from {phase.name}") from None
