"""Why a connection's sockets are not being read, as a set of named reasons per side.

Kafka's broker keeps one `ChannelMuteState`; aiohttp keeps two independent pause flags. kqp has
several independent reasons to stop reading (see `MuteReason`), and one must never resume what
another paused: a side is read again only when no reason is left on it. The core owns this state
(it decides whether requests already read may go on: `blocks_requests`) and says every change of a
reason as a `Mute` or `Unmute` action; the asyncio edge keeps the reasons per side from those
actions alone (`kqp.proxy.runtime.flow_control`). `THROTTLED` is set and lifted by the throttling
room only (`throttling.py`).
"""

from __future__ import annotations

from .events import MuteReason, Side

# Reasons that also stop the core forwarding requests it has already read (backpressure only
# stops reading more: what was read before may still go out).
BLOCKING = frozenset({MuteReason.THROTTLED, MuteReason.RESPONSE_PENDING, MuteReason.CONNECTING,
                      MuteReason.CLOSING, MuteReason.LOOKUP, MuteReason.COMMIT, MuteReason.IN_FLIGHT})


class MuteState:
    """Idempotent per reason; `mute`/`unmute` say whether the reason's presence changed."""

    __slots__ = ("_reasons",)

    def __init__(self) -> None:
        self._reasons: set[MuteReason] = set()

    def mute(self, reason: MuteReason) -> bool:
        if reason in self._reasons:
            return False
        self._reasons.add(reason)
        return True

    def unmute(self, reason: MuteReason) -> bool:
        if reason not in self._reasons:
            return False
        self._reasons.discard(reason)
        return True

    def __contains__(self, reason: MuteReason) -> bool:
        return reason in self._reasons

    def muted(self, side: Side) -> bool:
        """Whether `side`'s socket must not be read now."""
        return any(reason.side is side for reason in self._reasons)

    @property
    def blocks_requests(self) -> bool:
        """Whether requests already read must wait too."""
        return not self._reasons.isdisjoint(BLOCKING)

    @property
    def reasons(self) -> frozenset[MuteReason]:
        return frozenset(self._reasons)

