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
* `gate` mutes, before it is charged, a Produce or Fetch whose key is still over quota because of
  what the key's other connections were admitted since this connection's own throttle (the lines of
  that throttle's violations, `quotas.throttle.ThrottleLine`): until the key's line, untold, as a
  broker's muted socket is; the core reads the request again then;
* the timer (`SetTimer`) ends the mute (`timer_fired`), and so does the connection's close (`closed`).

Why the gate (beyond Kafka, which mutes only the connection that sent the request): a producer keeps
one connection per broker and all of them charge one sensor. Each throttle mutes until the key
would be back within its quota, but the others' requests admitted meanwhile hold it over when the
mute ends, so each connection passed one request past the line where one connection passes none:
n connections of b-byte requests ran at about Q x (1 + (n - 1) x b / (Q x W)) (windows W), 1.03-1.12
x Q simulated for three of 4-16 KiB against 100 kB/s, 1.07 in CI. Read only at the key's line, one
connection at a time gets past it, as the one connection of a single-broker client does, and n
connections get what one gets (quotas/README.md, "Several connections of one key"). One connection's own line
never ends later than its own mute (each of its throttles mutes from its charge on, at least as
long), so a client with one connection per key is throttled exactly as the broker throttles it.

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
counted and shown, not paced (why: `_paced`). A paced throttle keeps no line for `gate`: its pace
already queues the key's requests, whatever connection sends them.
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
from kqp.quotas.throttle import CAPPED_TYPES, ThrottleLine, largest, throttle_ms

from .authentication import Authentication
from .backoff import BackOff, backs_off
from .events import Action, Mute, MuteReason, Parts, SetTimer, Unmute
from .exchange import InFlight
from .hooks import ProxyObserver
from .mute import MuteState
from .settings import CoreSettings

__all__ = ["Throttle", "Throttling"]

THROTTLED = MuteReason.THROTTLED
# A line closer than this does not gate: a mute rounded to whole milliseconds (Kafka's unit) may end
# up to half of one before its own line, and a connection must never wait for its own throttle twice.
GATE_SLACK_SECONDS = 0.001
# The most the gate holds one request, untold (its client counts it against its request timeout, 30 s
# by default in the Java client and librdkafka): a third of that, or the quota's span if shorter.
# Past it the request goes, past the line, as Kafka's connections' do.
GATE_MAX_SECONDS = 10.0
Cause = tuple[Principal, QuotaType]


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
    # The lines of the request's producer or consumer rate violations (never a request quota's:
    # KIP-124 caps those at one window, and heartbeats must not wait for a Produce's key); none
    # when paced (the pace queues the key's requests already: the gate must not hold them).
    lines: tuple[ThrottleLine, ...] = field(default=(), compare=False, repr=False)


def _off() -> bool:
    return False


class Throttling:
    __slots__ = ("backoff", "cause", "gated_since", "lines", "muted_until", "mutes", "observer", "pacing")

    def __init__(self, observer: ProxyObserver, mutes: MuteState, auth: Authentication | None = None,
                 pacing: Callable[[], bool] = _off) -> None:
        self.observer = observer
        self.mutes = mutes                  # the connection's; only this room touches THROTTLED in it
        self.muted_until = 0.0              # loop time the current mute lasts until
        self.cause: Cause | None = None   # set exactly while the mute is on
        # Whether the client backs off (`auth`: the connection's identity, naming its software; None: not watched).
        self.backoff = None if auth is None else BackOff(auth, observer)
        self.pacing = pacing                # quotas.pacing, read at each decision (a reload changes it)
        # api key -> the lines of this connection's last throttle of a request of that API, with its cause
        self.lines: dict[int, tuple[tuple[ThrottleLine, ...], Cause]] = {}
        self.gated_since: float | None = None   # when the gate first held the request it holds

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
        lines = () if paced else tuple(v.line for v in violations
                                       if v.line is not None and v.quota_type not in CAPPED_TYPES)
        return Throttle(ms, ms / 1000, entry.principal, worst.quota_type, paced, (entry.api_key, entry.api_version),
                        blind, lines)

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

    def gate(self, api_key: int, principal: Principal, now: float, out: list[Action]) -> bool:
        """Whether a request of `api_key` from `principal`, just read, must wait for its key's line
        (other connections' usage holds the key over quota past this connection's own throttle):
        then the connection is muted until that line, and the caller reads the request again then.
        One request is held at most the quota's span, and `GATE_MAX_SECONDS`, in all."""
        found = self.lines.get(api_key)
        if found is None:
            return False
        lines, cause = found
        since = now if self.gated_since is None else self.gated_since
        cap = min(GATE_MAX_SECONDS, *(line.span for line in lines))
        # One deadline, compared in one form: `now - since >= cap` can be false at `now == since + cap`
        # (float rounding), and a hold until `now` mutes nothing, so the core would read it again at once.
        until = min(max(line.until for line in lines), since + cap)
        if cause[0] != principal or until - now <= GATE_SLACK_SECONDS:
            self.gated_since = None
            return False
        self.gated_since = since
        if self._mute_until(until, cause, out):
            out.append(SetTimer(self._wake_at()))
        return True

    def _mute(self, throttle: Throttle, now: float, out: list[Action]) -> bool:
        """Mute until `throttle` is over; whether that moved the mute's end (the timer then moves).
        Its lines gate the connection's next request of the same API (a paced one's: none, ever)."""
        cause = (throttle.principal, throttle.quota_type)
        if throttle.paced:
            self.lines.pop(throttle.request[0], None)
        elif throttle.lines:
            self.lines[throttle.request[0]] = (throttle.lines, cause)
        return self._mute_until(now + throttle.mute_seconds, cause, out)

    def _mute_until(self, until: float, cause: Cause, out: list[Action]) -> bool:
        if until <= self.muted_until:   # an earlier, longer throttle holds the connection already
            return False
        self.muted_until = until
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
