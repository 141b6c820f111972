"""Whether the client on a connection backs off by itself when it is throttled.

Since KIP-219 a broker answers a throttled request at once and mutes the connection; a client whose
request version throttles itself (Kafka's `shouldClientThrottle`: Produce v6+, Fetch v8+, ...) also
waits before it sends again. Two kinds do not: by version (no client-side throttling, or an acks=0
Produce) and by conduct (a newer version that sends anyway). The second is seen on the socket: kqp
does not read a muted one, so what the client sends meanwhile waits in the kernel. As a throttled
response goes the edge notes the unread bytes (`NoteUnread`); halfway through the mute the timer
fires (`probe_at`) and the edge says how many arrived since (`TimerFired.unread`). Guards keep an
honest client from being misjudged: no probe right after another response (`GRACE_SECONDS`), none on
a short mute (`MIN_PROBED_MUTE`), and `STRIKES` probes in a row must see bytes. The verdict
(`HONOURS`, `IGNORES` with its reason, `UNKNOWN`) and KIP-511's software name feed the metrics,
`kqp top` and `kqp explain`; proxy/README.md ("Pacing, back-off and giving up") has the reasoning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kqp.protocol.apis import API_NAMES, should_client_throttle

from .hooks import ProxyObserver

if TYPE_CHECKING:
    from .authentication import Authentication

__all__ = ["BY_VERSION", "HONOURS", "IGNORES", "OBSERVED", "UNKNOWN", "BackOff", "backs_off"]

HONOURS, IGNORES, UNKNOWN = "yes", "no", "unknown"
BY_VERSION, OBSERVED = "version", "observed"   # why a client does not back off
GRACE_SECONDS = 0.1     # a response this recent before the throttled one may be refilled: not probed
MIN_PROBED_MUTE = 0.08  # half of a shorter mute leaves the client no time to show itself: not probed
STRIKES = 2             # probes in a row that must see the client send before it is judged not to back off


def backs_off(api_key: int, api_version: int, expects_response: bool = True) -> bool:
    """Whether the client of such a request can back off by itself: its response exists and its
    version has client-side throttling (KIP-219)."""
    return expects_response and should_client_throttle(api_key, api_version)


class BackOff:
    """One connection's client: whether it backs off, and the probe that finds out."""

    __slots__ = ("answered_at", "auth", "observer", "probe_at", "reason", "strikes", "used", "verdict")

    def __init__(self, auth: Authentication, observer: ProxyObserver) -> None:
        self.auth = auth
        self.observer = observer
        self.verdict = UNKNOWN
        self.reason: str | None = None            # BY_VERSION or OBSERVED once it IGNORES
        self.used: tuple[int, int] | None = None  # the last throttled request's (api key, version)
        self.probe_at: float | None = None        # a probe in progress: when its timer reads it
        self.answered_at = float("-inf")          # when the last unthrottled response went out
        self.strikes = 0                          # probes in a row that saw the client send

    @property
    def seen_ignoring(self) -> bool:
        """Seen sending while throttled: counted as not backing off from then on (pacing goes by the
        request version alone: `backs_off`)."""
        return self.reason == OBSERVED

    @property
    def software(self) -> tuple[str, str]:
        """(name, version): KIP-511's, else "unknown" and the versions it was throttled on."""
        named = self.auth.software
        if named is not None:
            return named
        if self.used is None:
            return "unknown", "-"
        api, version = self.used
        return "unknown", f"{API_NAMES.get(api, api)} v{version}"

    def answered(self, now: float) -> None:
        """An unthrottled response went to the client at `now`: it may refill that slot at once."""
        self.answered_at = now

    def throttled(self, request: tuple[int, int], blind: bool, now: float, muted_until: float) -> bool:
        """A throttle was given to `request` (api key, version), its client `blind` to it (it cannot
        back off). True when a probe starts (the caller arms the timer for `probe_at`)."""
        self.used = request
        if blind:
            if self.reason is None:
                self.verdict, self.reason = IGNORES, BY_VERSION
            self._ignored(BY_VERSION)
            return False
        if self.seen_ignoring:
            self._ignored(OBSERVED)
            return False
        mute = muted_until - now
        if self.probe_at is not None or mute < MIN_PROBED_MUTE or now - self.answered_at < GRACE_SECONDS:
            return False
        self.probe_at = now + mute / 2
        return True

    def probe(self, now: float, unread: int | None, muted_until: float) -> None:
        """The connection's timer at `now`: read the probe once it is due, if it is still in the mute."""
        if self.probe_at is None or now < self.probe_at:
            return
        self.probe_at = None
        if unread is None or now >= muted_until:   # the socket cannot say, or the timer came too late
            return
        if unread == 0:
            self.strikes = 0
            if self.verdict == UNKNOWN:
                self.verdict = HONOURS
            return
        self.strikes += 1
        if self.strikes >= STRIKES:
            self.verdict, self.reason = IGNORES, OBSERVED
            self._ignored(OBSERVED)

    def ended(self) -> None:
        """The mute ended (or the connection closed): a probe not yet read says nothing."""
        self.probe_at = None

    def _ignored(self, reason: str) -> None:
        self.observer.throttle_ignored(*self.software, reason)
