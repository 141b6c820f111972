"""Why a connection's sockets are not being read, as a set of named reasons per side.

Kafka's broker keeps one `ChannelMuteState`; aiohttp keeps two independent pause flags. kqp has
several independent reasons to stop reading (see `MuteReason`), and one must never resume what
another paused: a side is read again only when no reason is left on it. The core owns this state,
the one record of it (it decides whether requests already read may go on: `blocks_requests`), and
says every change of a reason as a `Mute` or `Unmute` action; the asyncio edge asks it whether each
side is muted once per event (`kqp.proxy.runtime.flow_control`). `THROTTLED` is set and lifted by
the throttling room only (`throttling.py`).
"""

from __future__ import annotations

from .events import UPSTREAM_REASONS, MuteReason, Side

UPSTREAM = Side.UPSTREAM
# Reasons that also stop the core forwarding requests it has already read (backpressure only
# stops reading more: what was read before may still go out); all of them the client side's.
BLOCKING = frozenset({MuteReason.THROTTLED, MuteReason.RESPONSE_PENDING, MuteReason.CONNECTING,
                      MuteReason.CLOSING, MuteReason.LOOKUP, MuteReason.COMMIT, MuteReason.IN_FLIGHT})


class MuteState:
    """Idempotent per reason; `mute`/`unmute` say whether the reason's presence changed. The reasons
    are kept per side, as they are asked for: the edge asks after every event whether a side is muted."""

    __slots__ = ("_client", "_upstream")

    def __init__(self) -> None:
        self._client: set[MuteReason] = set()
        self._upstream: set[MuteReason] = set()

    # The side is found inline: a mute and two unmutes on every exchange.
    def mute(self, reason: MuteReason) -> bool:
        reasons = self._upstream if reason in UPSTREAM_REASONS else self._client
        if reason in reasons:
            return False
        reasons.add(reason)
        return True

    def unmute(self, reason: MuteReason) -> bool:
        reasons = self._upstream if reason in UPSTREAM_REASONS else self._client
        if reason not in reasons:
            return False
        reasons.discard(reason)
        return True

    def __contains__(self, reason: MuteReason) -> bool:
        return reason in self._client or reason in self._upstream

    def muted(self, side: Side) -> bool:
        """Whether `side`'s socket must not be read now."""
        return bool(self._upstream if side is UPSTREAM else self._client)

    @property
    def blocks_requests(self) -> bool:
        """Whether requests already read must wait too."""
        return not self._client.isdisjoint(BLOCKING)

    @property
    def reasons(self) -> frozenset[MuteReason]:
        return frozenset(self._client | self._upstream)
