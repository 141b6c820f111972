"""Whether one socket is read: paused or resumed to match the core's mute reasons (uvicorn's FlowControl).

The core keeps the one record of why a side must not be read (`kqp.proxy.connection.mute.MuteState`:
a set of named reasons per side, so one reason never resumes what another paused) and says every
change as a `Mute` or `Unmute` action, for playbooks, logs and traces. The edge does not keep a
copy: once after all the actions of one event it asks the core whether each side is muted and hands
the answer to that side's `FlowControl` (`sync`), so an event that lifts one reason and sets another
costs the transport nothing. Pausing and resuming are idempotent; a side without a transport yet
(the upstream while it connects) takes the state when one is attached.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["FlowControl"]


class Readable(Protocol):
    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class FlowControl:
    __slots__ = ("_reading", "_wanted", "transport")

    def __init__(self) -> None:
        self.transport: Readable | None = None
        self._reading = True   # a transport reads from the start
        self._wanted = True    # whether the side should be read, as last synced

    @property
    def reading(self) -> bool:
        """Whether the side's socket is being read now (as last synced)."""
        return self._reading

    def attach(self, transport: Readable) -> None:
        """The side's socket, reading from the start; paused at once if the side was muted already."""
        self.transport, self._reading = transport, True
        self.sync(self._wanted)

    def sync(self, wanted: bool) -> None:
        """Pause or resume the transport to match `wanted`, whether the side may be read (nothing when
        they agree)."""
        self._wanted = wanted
        if self.transport is None or wanted == self._reading:
            return
        self._reading = wanted
        if wanted:
            self.transport.resume_reading()
        else:
            self.transport.pause_reading()
