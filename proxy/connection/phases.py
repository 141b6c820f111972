"""A connection's life as explicit phases and a table of the moves between them (h11's way).

    CONNECTING --upstream up--> OPEN --client EOF / shutdown--> DRAINING --nothing owed--> CLOSED
         \\--upstream up, login--> LOGGING_IN --logged in--> OPEN
    CONNECTING, LOGGING_IN --client EOF / shutdown--> DRAINING      (any phase --close--> CLOSED)

CONNECTING and LOGGING_IN read the client's requests but hold them (the `CONNECTING` mute); OPEN
forwards and answers; DRAINING reads no new request but delivers what is owed, and the core closes
itself once nothing is; CLOSED takes no event. A move the table does not list is kqp's own bug and
raises `IllegalTransition`, which the core's one guard turns into a close with `internal_error`.
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

    # Identity hashes the table's keys in C: Enum's own hash is a Python call, two for each move.
    __hash__ = object.__hash__


class Move(enum.Enum):
    """What moves a connection from one phase to the next."""

    UPSTREAM_UP = "the upstream connection is up"
    LOGIN_STARTED = "the upstream connection is up and kqp logs in on it"
    LOGGED_IN = "kqp's upstream login succeeded"
    CLIENT_EOF = "the client half-closed"
    SHUTDOWN = "the process began shutting down"
    CLOSE = "the connection closes"

    __hash__ = object.__hash__   # as Phase's


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
