"""Why a client connection is not being read, as a set of named reasons.

Kafka's broker keeps one `ChannelMuteState`; aiohttp keeps two independent pause flags. kqp has
several independent reasons to stop reading a client socket (a KIP-219 throttle, the upstream's
write buffer being full, the upstream connection not being up yet, a shutdown), and one must never
resume what another paused. Reading resumes only when no reason is left.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class MuteReason(enum.Enum):
    THROTTLED = "throttled"          # KIP-219: the delay queue unmutes
    BACKPRESSURE = "backpressure"    # the upstream transport is over its high-water mark
    CONNECTING = "connecting"        # the upstream connection is not established yet
    CLOSING = "closing"              # shutdown: read no new requests, let responses drain
    LOOKUP = "lookup"                # a mutation request waits for topic metadata (KIP-599 costs)


class MuteState:
    """Idempotent mute/unmute per reason; calls `pause`/`resume` only on real transitions."""

    __slots__ = ("_pause", "_reasons", "_resume")

    def __init__(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self._reasons: set[MuteReason] = set()
        self._pause = pause
        self._resume = resume

    def mute(self, reason: MuteReason) -> None:
        was_muted = bool(self._reasons)
        self._reasons.add(reason)
        if not was_muted:
            self._pause()

    def unmute(self, reason: MuteReason) -> None:
        if reason not in self._reasons:
            return
        self._reasons.discard(reason)
        if not self._reasons:
            self._resume()

    def __contains__(self, reason: MuteReason) -> bool:
        return reason in self._reasons

    @property
    def muted(self) -> bool:
        return bool(self._reasons)

    @property
    def reasons(self) -> frozenset[MuteReason]:
        return frozenset(self._reasons)
