"""Whether the client on a connection backs off by itself when it is throttled (issue 20).

Since KIP-219 a broker answers a throttled request at once and mutes the connection; a client
whose request version throttles itself (Kafka's `AbstractResponse.shouldClientThrottle`: Produce
v6+, Fetch v8+, ...; `kqp.protocol.apis.should_client_throttle`) also waits the throttle out before
it sends again. Two kinds of client do not:

* by version: a request whose version has no client-side throttling (Produce <= v5, Fetch <= v7,
  ...), or an acks=0 Produce, which has no response to carry a throttle;
* by conduct: a client on a newer version that sends anyway (Sarama 1.22 ignores throttle_time_ms).

The second is seen on the socket. While a connection is muted kqp does not read it, so what the
client sends meanwhile waits in the kernel. When a throttled response goes out the edge notes the
bytes unread (`NoteUnread`): those were sent before the client could know. Halfway through the mute
the timer fires (`probe_at`) and the edge says how many arrived since (`TimerFired.unread`). A
client that backs off sends nothing before its throttle is over, so a byte that arrived is a request
sent while it should have been waiting. A client that ignores the throttle, even one that sends only
when a response frees one of its in-flight slots (Sarama), refills the slot the throttled response
freed: seen. Halfway rather than at the end: a client that waits exactly its throttle sends again
the moment it is over, and a timer fired a little late would catch it; a probe read after the mute
ended says nothing. Three guards keep an honest client from being misjudged:

* a response that went to the client less than `GRACE_SECONDS` before the throttled one (a
  pipelining client's earlier answers, often in the same write) frees slots the client may refill
  at once, and rightly: such a throttle is not probed;
* a mute shorter than `MIN_PROBED_MUTE` is not probed: half of it is too short for a reaction;
* it takes `STRIKES` probes in a row that saw the client send to judge it, so one stray request
  never does (a probe that saw nothing starts the count again).

(Bytes the client wrote before it read the response but that were still crossing the network when
the response left would count as sent during the mute: a sidecar or LAN hop delivers them long
before half a mute has passed, and the strikes absorb one.)

The verdict is the connection's: `HONOURS` (it waited out a throttle), `IGNORES` (by version, or
seen sending during a throttle: sticky for the connection's life), `UNKNOWN` (never throttled on a
version that throttles itself). The throttling room paces the requests of versions without
client-side throttling (a connection seen not to back off is not paced: throttling.py says why); the observer counts
each throttle given to a client that does not back off, by its software: KIP-511's names from
ApiVersions v3+ (`Authentication.software`), else "unknown" and the throttled request's API and
version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kqp.protocol.apis import API_NAMES, should_client_throttle

from .events import Action, NoteUnread
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
        """Seen sending while throttled: every request of the connection is paced from then on."""
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

    def throttled(self, request: tuple[int, int], blind: bool, now: float, muted_until: float,
                  out: list[Action]) -> bool:
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
        out.append(NoteUnread())
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
