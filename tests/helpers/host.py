"""A `Host` for one part of the connection core on its own (kqp.proxy.connection.host).

The core gives its parts three things: actions added to what the event returns, mute reasons kept in
its `MuteState` (said as `Mute`/`Unmute` only when they change), and a close. `PartHost` keeps them
the same way, where a test can read them: `out`, `mutes`, `closed`.
"""

from __future__ import annotations

from kqp.proxy.connection.events import Action, Mute, MuteReason, Unmute
from kqp.proxy.connection.mute import MuteState


class PartHost:
    def __init__(self) -> None:
        self.out: list[Action] = []
        self.mutes = MuteState()
        self.closed: tuple[str, str | None] | None = None

    def emit(self, action: Action) -> None:
        self.out.append(action)

    def mute(self, reason: MuteReason) -> None:
        if self.mutes.mute(reason):
            self.out.append(Mute(reason))

    def unmute(self, reason: MuteReason) -> bool:
        if lifted := self.mutes.unmute(reason):
            self.out.append(Unmute(reason))
        return lifted

    def close(self, reason: str, message: str | None = None) -> None:
        self.closed = (reason, message)

    def taken(self) -> list[Action]:
        """The actions asked for since the last call."""
        out, self.out = self.out, []
        return out
