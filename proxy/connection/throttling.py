"""One connection's throttling room: a request's throttle decided, its mute started and ended here.

Kafka throttles a channel in one place (ClientQuotaManager.throttle, ThrottledChannel): every quota
of a request is recorded, the largest throttle wins, the response tells the client and the channel
is muted for it, and the same object ends the mute. `Throttling` is that place for a connection:
`decide` turns the violations found when a request is read into its `Throttle` (carried on its
`Flight`), `settle` completes that decision with what its response adds, `patched` writes
`throttle_time_ms` into the response, `throttle` counts it once and mutes from now, `hold` mutes at
once for a throttle known when the request is read (a broker reads one request at a time), `gate`
holds a throttled connection's next Produce or Fetch while the key's other connections keep it over
quota, and the timer or the close ends the mute. Only this room sets and lifts `THROTTLED` and calls
`mute_started`/`mute_ended`, always in pairs. An observed quota (`mode: observe`) is decided as if
enforced; `settle` counts such a throttle and hands on only what the enforced quotas give. Pacing and
the gate are explained in quotas/README.md ("Pacing", "Several connections of one key").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kqp.protocol.apis import ApiKey
from kqp.protocol.errors import ProtocolError
from kqp.protocol.records import BodyError
from kqp.protocol.throttle import throttle_patch_parts
from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal, QuotaType
from kqp.quotas.throttle import CAPPED_TYPES, ThrottleLine, largest, throttle_ms

from .authentication import Authentication
from .backoff import BackOff, backs_off
from .events import Action, Mute, MuteReason, Parts, SetTimer, Unmute
from .hooks import ProxyObserver
from .mute import MuteState
from .plans import Flight, Throttle

_GATED_BY_REQUEST_QUOTAS = frozenset({ApiKey.Produce, ApiKey.Fetch})

__all__ = ["Throttle", "Throttling"]

THROTTLED = MuteReason.THROTTLED
MUTATION = QuotaType.CONTROLLER_MUTATION_RATE
# A line closer than this does not gate: a mute rounded to whole milliseconds (Kafka's unit) may end
# up to half of one before its own line, and a connection must never wait for its own throttle twice.
GATE_SLACK_SECONDS = 0.001
# The most the gate holds one request, untold (its client counts it against its request timeout, 30 s
# by default in the Java client and librdkafka): a third of that, or the quota's span if shorter.
# Past it the request goes, past the line, as Kafka's connections' do.
GATE_MAX_SECONDS = 10.0
# The most a request charged over a steady quota waits before it is forwarded (`Throttle.hold`), the
# gate's wait included: two thirds of the clients' default request timeout, so that the response
# still comes in time. Past it the request goes, over the line, as Kafka forwards every request.
HOLD_MAX_SECONDS = 20.0
Cause = tuple[Principal, QuotaType]


def _off() -> bool:
    return False


class Throttling:
    __slots__ = ("backoff", "cause", "gated", "gated_since", "lines", "muted_until", "mutes", "observer", "pacing",
                 "send_at")

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
        self.gated = 0.0                        # how long the gate held the request it let go last
        self.send_at: float | None = None       # when the request held before forwarding goes (`hold`)

    @property
    def muted(self) -> bool:
        return self.cause is not None

    def decide(self, flight: Flight, violations: list[Violation], lines: tuple[ThrottleLine, ...] = (),
               now: float | None = None) -> Throttle | None:
        """KIP-124 co-existence: the request's one throttle, or None when nothing throttles it. `now`:
        when it is decided (the request's read time unless given). Every quota counts as enforced;
        when an observed one decides, the throttle is marked so and carries what the enforced quotas
        alone decide (what the client gets)."""
        throttle = self._decide(flight, violations, lines, now)
        if throttle is None or throttle.worst is None or not throttle.worst.observed:
            return throttle
        enforced = [v for v in violations if not v.observed]
        return replace(throttle, observed=True,
                       enforced=self._decide(flight, enforced, lines, now) if enforced else None)

    def _decide(self, flight: Flight, violations: list[Violation], lines: tuple[ThrottleLine, ...],
                now: float | None) -> Throttle | None:
        if not violations or (worst := largest(violations)) is None:
            return None
        blind = not backs_off(flight.api_key, flight.api_version, flight.expects_response)
        seconds, paced = self._paced(worst, blind)
        ms = throttle_ms(seconds)
        if not ms:
            return None
        if paced or (worst.steady and flight.plan.produced is not None and worst.quota_type not in CAPPED_TYPES):
            lines = ()   # a steady quota's request charged as it is read waits its turn in `hold`, not the gate
        else:
            # An observed quota's line gates nothing: it holds no connection back. A request quota's
            # (steady only: its line is the key's debt, its throttle capped at a window) gates the
            # connection's next Produce or Fetch, never a heartbeat or a commit.
            gates_capped = flight.api_key in _GATED_BY_REQUEST_QUOTAS
            lines += tuple(v.line for v in violations if v.line is not None and not v.observed
                           and (v.quota_type not in CAPPED_TYPES or (gates_capped and v.steady)))
        until = hold = None
        if worst.steady:
            until = (flight.sent_at if now is None else now) + seconds
            hold = min(worst.hold_seconds, max(0.0, HOLD_MAX_SECONDS - self.gated)) or None
        return Throttle(ms, ms / 1000, flight.principal, worst.quota_type, paced,
                        (flight.api_key, flight.api_version), blind, lines, worst, until, hold)

    def settle(self, flight: Flight, late: list[Violation], now: float) -> Throttle | None:
        """The request's throttle as its response goes (or, for a request without one, once it is
        read): the one decided when it was read, raised by what the response added. This is where a
        decision becomes what the client gets: an observed throttle is counted here, once per request,
        and only its enforced part goes on to be told and muted for."""
        throttle = self._settled(flight, late, now)
        if throttle is None or not throttle.observed:
            return throttle
        self.observer.observed_throttled(throttle.principal, throttle.quota_type, throttle.ms / 1000)
        return throttle.enforced

    def _settled(self, flight: Flight, late: list[Violation], now: float) -> Throttle | None:
        """A mutation throttle counts from when it was recorded: the upstream's latency is deducted,
        as Kafka's ControllerMutationQuota does."""
        carried = flight.throttle
        if carried is None or carried.worst is None:
            return self.decide(flight, late, now=now) if late else None
        # What decided it (and, for an observed decision, the enforced one beside it), brought to now:
        # a mutation throttle less the upstream's latency; a steady quota's, what is left of it to its
        # line, which is told and muted for.
        pairs = [(carried.worst, carried.until)]
        if carried.enforced is not None and carried.enforced.worst is not None:
            pairs.append((carried.enforced.worst, carried.enforced.until))
        changed = bool(late)
        worsts = []
        for worst, until in pairs:
            if worst.quota_type is MUTATION and now > flight.sent_at:
                worst = Violation(MUTATION, max(0.0, worst.throttle_seconds - (now - flight.sent_at)), worst.key,
                                  observed=worst.observed)
                changed = True
            elif until is not None:
                worst = replace(worst, throttle_seconds=max(0.0, until - now), hold_seconds=0.0)
                changed = True
            worsts.append(worst)
        if not changed:
            return carried   # the decision as it was made
        acted = carried.acted
        return self.decide(flight, [*worsts, *late], () if acted is None or acted.paced else acted.lines, now)

    def _paced(self, worst: Violation, blind: bool) -> tuple[float, bool]:
        """The throttle `worst` asks for, as Kafka's broker mutes for it; or, paced, its pace: for a
        client that cannot back off (`blind`) when it is shorter."""
        pace = worst.pace_seconds
        # A steady quota's throttle is the key's debt, which no request may skip: never paced.
        if pace is None or pace >= worst.throttle_seconds or worst.steady or not self.pacing():
            return worst.throttle_seconds, False
        if blind:
            return pace, True
        # A connection seen not to back off (backoff.py) is counted and shown but not paced: paced by
        # its cost, librdkafka and aiokafka (which never back off) ran 1.2-1.5x their quota over some
        # spans in tests/e2e/test_quota_producers.py, as a pace never pays back the burst the sampled
        # rate lets through when old samples expire. Until the pace accounts for that, Kafka's mute.
        return worst.throttle_seconds, False

    def patched(self, flight: Flight, frame: Parts, body_offset: int, throttle: Throttle) -> Parts:
        """The response with the request's throttle in `throttle_time_ms` (KIP-219, every version)."""
        try:
            patched = throttle_patch_parts(flight.api_key, flight.api_version, frame, body_offset, throttle.ms)
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
        """Mute from `now` for a throttle known as the request is read (what the client gets of it);
        it is counted with the response. Its `hold`, if any, is how long the request waits before it
        is forwarded (`send_due`)."""
        self.gated = 0.0   # the gate's wait counted against this request's hold: done with
        if throttle is None or (throttle := throttle.acted) is None:
            return
        moved = self._mute(throttle, now, out)
        if throttle.hold:
            self.send_at = now + throttle.hold
            moved = True
        if moved:
            out.append(SetTimer(self._wake_at()))

    def send_due(self, now: float) -> bool:
        """Whether the request held before forwarding goes now (the timer fired for it)."""
        if self.send_at is None or now < self.send_at:
            return False
        self.send_at = None
        return True

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
            self.gated = now - since
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
        """When the timer fires next: the mute's end, or before it the held request's sending or the
        back-off probe's reading."""
        probe = None if self.backoff is None else self.backoff.probe_at
        wake = self.muted_until if probe is None or probe >= self.muted_until else probe
        return wake if self.send_at is None or self.send_at >= wake else self.send_at

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
        self.send_at = None
        self._end()

    def _end(self, due: float | None = None) -> None:
        if self.cause is not None:
            self.observer.mute_ended(*self.cause, due)
            self.cause = None
            if self.backoff is not None:
                self.backoff.ended()
