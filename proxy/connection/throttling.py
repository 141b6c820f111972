"""One connection's throttling room: a request's throttle decided, told and muted for here.

Kafka throttles a channel in one place (ClientQuotaManager.throttle, ThrottledChannel): every quota
of a request is recorded, the largest throttle wins, the response goes at once telling the client,
and the channel is muted for the same time. `Throttling` is that place for a connection. `decide`
takes the request's throttle once (`quotas.rates.throttle.decide`), where its charges are complete: when
it is read, or for a Fetch whose response is charged when that response is back; `mute` mutes from
then, so nothing more is read, as a broker reads one request at a time. `patched` writes
`throttle_time_ms` into the response (the larger of the upstream's and kqp's: the mute lasts that
long), `told` counts what the client was told as it goes, and the timer or the close ends the mute.
Only this room sets and lifts `THROTTLED` and calls `mute_started`/`mute_ended`, always in pairs. An
observed quota (`mode: observe`) is decided as if enforced, counted here, and only what the enforced
quotas decide is told and muted for. Pacing is explained in quotas/README.md ("Pacing").
"""

from __future__ import annotations

from collections.abc import Callable

from kqp.protocol.errors import ProtocolError
from kqp.protocol.records import BodyError
from kqp.protocol.throttle_field import throttle_patch_parts
from kqp.quotas.model import Principal, QuotaType
from kqp.quotas.rates.throttle import Throttle, Violation, decide

from .authentication import Authentication
from .backoff import BackOff, backs_off
from .events import MuteReason, NoteUnread, Parts, SetTimer
from .hooks import ProxyObserver
from .host import Host
from .plans import Flight

__all__ = ["Throttle", "Throttling"]

THROTTLED = MuteReason.THROTTLED
Cause = tuple[Principal, QuotaType]


def _off() -> bool:
    return False


class Throttling:
    __slots__ = ("backoff", "cause", "host", "muted_until", "observer", "pacing")

    def __init__(self, host: Host, observer: ProxyObserver, auth: Authentication | None = None,
                 pacing: Callable[[], bool] = _off) -> None:
        self.host = host                    # the connection: only this room mutes it for THROTTLED
        self.observer = observer
        self.muted_until = 0.0              # loop time the current mute lasts until
        self.cause: Cause | None = None   # set exactly while the mute is on
        # Whether the client backs off (`auth`: the connection's identity, naming its software; None: not watched).
        self.backoff = None if auth is None else BackOff(auth, observer)
        self.pacing = pacing                # quotas.pacing, read at each decision (a reload changes it)

    @property
    def muted(self) -> bool:
        return self.cause is not None

    def decide(self, flight: Flight, violations: list[Violation], now: float) -> Throttle | None:
        """The request's one throttle, decided at `now` from every quota it was charged to (None:
        nothing to tell or mute for). An observed throttle is counted here and only its enforced
        part is returned."""
        blind = not backs_off(flight.api_key, flight.api_version, flight.expects_response)
        throttle = decide(violations, flight.principal, now, blind=blind, pacing=self.pacing())
        if throttle is None or not throttle.observed:
            return throttle
        self.observer.observed_throttled(throttle.principal, throttle.quota_type, throttle.ms / 1000)
        return throttle.enforced

    def mute(self, flight: Flight, throttle: Throttle, now: float) -> None:
        """Mute the connection from `now`, the decision, until `throttle` is over. A request without a
        response (acks=0) is told nothing: its throttle counts as told now."""
        if self._mute_until(throttle.until, (throttle.principal, throttle.quota_type), now):
            self.host.emit(SetTimer(self._wake_at()))
        if not flight.expects_response:
            self.told(flight, throttle, throttle.ms, now)

    def patched(self, flight: Flight, frame: Parts, body_offset: int, throttle: Throttle,
                now: float) -> tuple[Parts, int]:
        """The response with `throttle_time_ms` filled (KIP-219, every version that has the field) and
        the milliseconds it tells: kqp's throttle, or the upstream's own when that is longer, and
        then the mute lasts that long too, so the client is never told less than it is held."""
        try:
            patched, upstream_ms = throttle_patch_parts(flight.api_key, flight.api_version, frame, body_offset,
                                                        throttle.ms)
        except (ProtocolError, BodyError):
            # The field is the client's hint only; the mute protects the upstream either way. A
            # response kqp cannot walk goes out as the upstream sent it, and is counted.
            self.observer.upstream_anomaly("unreadable")
            return frame, throttle.ms
        if upstream_ms <= throttle.ms:
            return (frame if patched is None else patched), throttle.ms
        if self._mute_until(now + upstream_ms / 1000, (throttle.principal, throttle.quota_type), now):
            self.host.emit(SetTimer(self._wake_at()))
        return frame, upstream_ms

    def told(self, flight: Flight, throttle: Throttle, ms: int, now: float) -> None:
        """`throttle` went to the client as `ms` with its response (or, acks=0, was decided): counted
        once, and the back-off probe watches whether the client waits it out."""
        self.observer.throttled(throttle.principal, throttle.quota_type, ms / 1000)
        backoff = self.backoff
        blind = not backs_off(flight.api_key, flight.api_version, flight.expects_response)
        if backoff is not None and backoff.throttled((flight.api_key, flight.api_version), blind, now,
                                                     self.muted_until):
            # A probe starts: what the client has sent so far is noted, and read when the probe is due.
            self.host.emit(NoteUnread())
            self.host.emit(SetTimer(self._wake_at()))

    def answered(self, now: float) -> None:
        """A response went to the client unthrottled (the back-off probe gives it a grace)."""
        if self.backoff is not None:
            self.backoff.answered(now)

    def _mute_until(self, until: float, cause: Cause, now: float) -> bool:
        """Mute from `now` until `until`; whether that moved the mute's end (the timer then moves)."""
        if until <= self.muted_until:   # an earlier, longer throttle holds the connection already
            return False
        self.muted_until = until
        if cause != self.cause:
            self._end(now)
            self.cause = cause
            self.observer.mute_started(*cause, now)
        self.host.mute(THROTTLED)
        return True

    def _wake_at(self) -> float:
        """When the timer fires next: the mute's end, or before it the back-off probe's reading."""
        probe = None if self.backoff is None else self.backoff.probe_at
        return self.muted_until if probe is None or probe >= self.muted_until else probe

    def timer_fired(self, now: float, unread: int | None = None) -> bool:
        """The connection's timer (`unread`: what the client sent since `NoteUnread`, for the probe):
        True when the mute has ended now (the core reads on)."""
        if self.cause is None:
            return False
        if self.backoff is not None:
            self.backoff.probe(now, unread, self.muted_until)
        if now < self.muted_until:   # woken early, or for the probe: wait for the rest
            self.host.emit(SetTimer(self._wake_at()))
            return False
        self._end(self.muted_until)   # counted until it was due, however late the timer fired
        self.host.unmute(THROTTLED)
        return True

    def closed(self) -> None:
        """The connection closed: a mute in progress ends with it."""
        self._end()

    def _end(self, due: float | None = None) -> None:
        if self.cause is not None:
            self.observer.mute_ended(*self.cause, due)
            self.cause = None
            if self.backoff is not None:
                self.backoff.ended()
