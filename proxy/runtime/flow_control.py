"""Whether one socket is read: paused while any of its mute reasons is held (uvicorn's FlowControl).

The core says why a side must not be read with `Mute(reason)` and `Unmute(reason)` actions
(`kqp.proxy.connection.mute`); a side is read again only when none of its reasons is left, so one
reason can never resume what another paused (aiohttp's two pause flags, combined explicitly). The
edge keeps one `FlowControl` per side and hands it each action, so it never asks the core for its
state; the actions keep saying *why*, which is what playbooks, logs and traces want.

Changes are applied by `sync`, once after all the actions of one event: an event that lifts one
reason and sets another costs the transport nothing. Pausing and resuming are idempotent; a side
without a transport yet (the upstream while it connects) takes its state when one is attached.
"""

from __future__ import annotations

from typing import Protocol

from kqp.proxy.connection.events import MuteReason

__all__ = ["FlowControl"]


class Readable(Protocol):
    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class FlowControl:
    __slots__ = ("_reading", "_reasons", "transport")

    def __init__(self) -> None:
        self.transport: Readable | None = None
        self._reasons: set[MuteReason] = set()
        self._reading = True   # a transport reads from the start

    @property
    def reading(self) -> bool:
        """Whether the side's socket is being read now (as last synced)."""
        return self._reading

    @property
    def wanted(self) -> bool:
        """Whether the side should be read: no reason to mute it is left."""
        return not self._reasons

    def mute(self, reason: MuteReason) -> None:
        self._reasons.add(reason)

    def unmute(self, reason: MuteReason) -> None:
        self._reasons.discard(reason)

    def attach(self, transport: Readable) -> None:
        """The side's socket, reading from the start; paused at once if a reason is already held."""
        self.transport, self._reading = transport, True
        self.sync()

    def sync(self) -> None:
        """Pause or resume the transport to match the reasons held (nothing when they agree)."""
        want = not self._reasons
        if self.transport is None or want == self._reading:
            return
        self._reading = want
        if want:
            self.transport.resume_reading()
        else:
            self.transport.pause_reading()
