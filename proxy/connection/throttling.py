"""One connection's throttle room: a request's throttle decided once, its mute started and ended here.

Kafka's broker throttles a channel in one place (ClientQuotaManager.throttle, ThrottledChannel): the
request's quotas are all recorded, the largest throttle wins, the client is told it in the
response and its channel is muted for it, and the same object ends the mute when the time is up.
`Throttling` is that place for a kqp connection:

* `decide` turns a request's violations into its one `Throttle`: the largest throttle
  (`quotas.throttle.combine`: ties name the request quota), in the milliseconds Kafka sends
  (`throttle_ms`: rounded half up, and one that rounds to 0 is none), with its cause (whose quota);
* `throttled_response` is the response as it goes out with the throttle (KIP-219, every version): what the
  request's handler makes of it (`fetch_throttle: empty`), with `throttle_time_ms` raised where
  the version has the field, as views of the frame around a fresh 4-byte field;
* `throttle` is the request's throttle, once: the observer hears of it (`throttled`) and the client
  side is muted for it from now (KIP-219: the core has just sent the response, or for an acks=0
  Produce there is none);
* `hold` mutes for a throttle known when the request is read (a Produce's bytes over quota, a
  mutation the gate throttled): a broker, which reads one request at a time, would read nothing more
  either; the request's throttle is still counted once, with its response;
* the timer (`SetTimer`) ends the mute (`timer_fired`), and so does the connection's close (`closed`).

A mute always has a cause, and the observer's `mute_started` and `mute_ended` are called here and
nowhere else, in pairs: a connection muted by one cause and then kept muted longer by another ends
the first and starts the second, so `kqp_muted_connections` counts each muted connection once,
under the throttle holding it now. The mute reason `THROTTLED` is set and lifted only here. A mute
the timer ends is reported as ending when it was due (`mute_ended(due=)`): a timer that fires late
on a busy loop is the loop's delay, not the throttle's, so `kqp_muted_seconds_total` does not grow
with the machine's load.

Pacing (issue 20, `quotas.pacing`, beyond Kafka) is decided in `_paced`: a request whose client
cannot back off by itself (a version without client-side throttling, or an acks=0 Produce) gets the
pace of the violation that decides its throttle (`Violation.pace_seconds`: its own cost, queued
behind the entity's other paced requests, quotas/sensor.py) when that is shorter. The full usage
stays recorded, so the rate is still held. A connection seen sending while throttled (backoff.py) is
counted and shown, not paced (why: `_paced`).
`throttle_time_ms` then says the paced mute: the field always tells the client how long its
connection is muted, as a broker's does; a client that honours it (a mixed-version client, or one
misjudged) waits exactly as long as kqp mutes it, and a client that ignores it does not care. While
a connection is throttled the room also runs `BackOff`'s probe (the timer fires halfway through the
mute too) and tells it each throttle and each unthrottled response (`answered`), so the observer
learns which clients do not back off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kqp.protocol.errors import ProtocolError
from kqp.protocol.records import BodyError
from kqp.protocol.throttle import throttle_patch_parts
from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal, QuotaType
from kqp.quotas.throttle import largest, throttle_ms

from .authentication import Authentication
from .backoff import BackOff, backs_off
from .events import Action, Mute, MuteReason, Parts, SetTimer, Unmute
from .exchange import InFlight
from .hooks import ProxyObserver
from .mute import MuteState
from .settings import CoreSettings

__all__ = ["Throttle", "Throttling"]

THROTTLED = MuteReason.THROTTLED


@dataclass(frozen=True, slots=True)
class Throttle:
    """One request's throttle."""

    ms: int                 # throttle_time_ms as the client is told it (> 0)
    mute_seconds: float     # how long the client's socket is muted for it
    principal: Principal    # whose quota, and which, caused it
    quota_type: QuotaType
    paced: bool = False     # shortened to its pace: the client does not back off (issue 20)
    request: tuple[int, int] = field(default=(-1, -1), compare=False)   # the request's (api key, version)
    blind: bool = field(default=False, compare=False)   # its client cannot back off (version, acks=0)


def _off() -> bool:
    return False


class Throttling:
    __slots__ = ("backoff", "cause", "muted_until", "mutes", "observer", "pacing")

    def __init__(self, observer: ProxyObserver, mutes: MuteState, auth: Authentication | None = None,
                 pacing: Callable[[], bool] = _off) -> None:
        self.observer = observer
        self.mutes = mutes                  # the connection's; only this room touches THROTTLED in it
        self.muted_until = 0.0              # loop time the current mute lasts until
        self.cause: tuple[Principal, QuotaType] | None = None   # set exactly while the mute is on
        # Whether the client backs off (`auth`: the connection's identity, naming its software; None: not watched).
        self.backoff = None if auth is None else BackOff(auth, observer)
        self.pacing = pacing                # quotas.pacing, read at each decision (a reload changes it)

    @property
    def muted(self) -> bool:
        return self.cause is not None

    def decide(self, entry: InFlight, violations: list[Violation]) -> Throttle | None:
        """KIP-124 co-existence: the request's one throttle, or None when nothing throttles it."""
        if not violations or (worst := largest(violations)) is None:
            return None
        blind = not backs_off(entry.api_key, entry.api_version, entry.expects_response)
        seconds, paced = self._paced(worst, blind)
        ms = throttle_ms(seconds)
        if not ms:
            return None
        return Throttle(ms, ms / 1000, entry.principal, worst.quota_type, paced, (entry.api_key, entry.api_version),
                        blind)

    def _paced(self, worst: Violation, blind: bool) -> tuple[float, bool]:
        """The throttle `worst` asks for, as Kafka's broker mutes for it; or, paced, its pace: for a
        client that cannot back off (`blind`) when it is shorter."""
        pace = worst.pace_seconds
        if pace is None or pace >= worst.throttle_seconds or not self.pacing():
            return worst.throttle_seconds, False
        if blind:
            return pace, True
        # A connection seen not to back off (backoff.py) is counted and shown but not paced: paced by
        # its cost, librdkafka and aiokafka (which never back off) ran 1.2-1.5x their quota over some
        # spans in tests/e2e/test_quota_producers.py, as a pace never pays back the burst the sampled
        # rate lets through when old samples expire. Until the pace accounts for that, Kafka's mute.
        return worst.throttle_seconds, False

    def throttled_response(self, entry: InFlight, frame: Parts, body_offset: int, throttle: Throttle, now: float,
                           settings: CoreSettings) -> Parts:
        """The response as it goes out with the request's throttle."""
        frame = entry.handler.on_throttled(entry, frame, body_offset, throttle.ms, now, settings)
        try:
            patched = throttle_patch_parts(entry.api_key, entry.api_version, frame, body_offset, throttle.ms)
        except (ProtocolError, BodyError):
            # The field is the client's hint only; the mute protects the upstream either way. A
            # response kqp cannot walk goes out as the upstream sent it, and is counted.
            self.observer.upstream_anomaly("unreadable")
            patched = None
        return patched if patched is not None else frame

    def throttle(self, throttle: Throttle | None, now: float, out: list[Action]) -> None:
        """The request's throttle, counted once, and the mute for it from `now`."""
        if throttle is None:
            return
        self.observer.throttled(throttle.principal, throttle.quota_type, throttle.ms / 1000)
        moved = self._mute(throttle, now, out)
        backoff = self.backoff
        if backoff is not None and backoff.throttled(throttle.request, throttle.blind, now, self.muted_until, out):
            moved = True
        if moved:
            out.append(SetTimer(self._wake_at()))

    def answered(self, now: float) -> None:
        """A response went to the client unthrottled (the back-off probe gives it a grace)."""
        if self.backoff is not None:
            self.backoff.answered(now)

    def hold(self, throttle: Throttle | None, now: float, out: list[Action]) -> None:
        """Mute from `now` for a throttle known as the request is read; it is counted with the response."""
        if throttle is not None and self._mute(throttle, now, out):
            out.append(SetTimer(self._wake_at()))

    def _mute(self, throttle: Throttle, now: float, out: list[Action]) -> bool:
        """Mute until `throttle` is over; whether that moved the mute's end (the timer then moves)."""
        until = now + throttle.mute_seconds
        if until <= self.muted_until:   # an earlier, longer throttle holds the connection already
            return False
        self.muted_until = until
        cause = (throttle.principal, throttle.quota_type)
        if cause != self.cause:
            self._end()
            self.cause = cause
            self.observer.mute_started(*cause)
        if self.mutes.mute(THROTTLED):
            out.append(Mute(THROTTLED))
        return True

    def _wake_at(self) -> float:
        """When the timer fires next: the mute's end, or before it the back-off probe's reading."""
        probe = None if self.backoff is None else self.backoff.probe_at
        return self.muted_until if probe is None or probe >= self.muted_until else probe

    def timer_fired(self, now: float, out: list[Action], unread: int | None = None) -> bool:
        """The connection's timer (`unread`: what the client sent since `NoteUnread`, for the probe):
        True when the mute has ended now (the core reads on)."""
        if self.cause is None:
            return False
        if self.backoff is not None:
            self.backoff.probe(now, unread, self.muted_until)
        if now < self.muted_until:   # woken early, or for the probe: wait for the rest
            out.append(SetTimer(self._wake_at()))
            return False
        self._end(self.muted_until)   # counted until it was due, however late the timer fired
        if self.mutes.unmute(THROTTLED):
            out.append(Unmute(THROTTLED))
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
