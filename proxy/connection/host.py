"""What a connection's parts may ask of the connection that owns them.

The core (`core.Connection`) is composed of parts with state of their own: the way to OPEN
(`establishing.Establishing`), the waits on the runtime (`awaiting.Awaiting`), the throttling room.
A part never reaches into the core's state; it asks through this narrow interface, as a mitmproxy
layer yields commands to the layer above it: emit an action, mute or unmute for a reason of its
own, close the connection.
"""

from __future__ import annotations

from typing import Protocol

from .events import Action, MuteReason

__all__ = ["Host"]


class Host(Protocol):
    def emit(self, action: Action) -> None:
        """Add `action` to what the current event returns."""

    def mute(self, reason: MuteReason) -> None: ...

    def unmute(self, reason: MuteReason) -> bool:
        """Lift `reason`; True when it was held."""

    def close(self, reason: str, message: str | None = None) -> None: ...
