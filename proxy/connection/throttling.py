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
under the throttle holding it now. The mute reason `THROTTLED` is set and lifted only here.

Issue 20's pacing decides in `_mute_seconds`: how long a throttle mutes the socket, which for a
client that does not back off may be less than the throttle it is told and charged.
"""

from __future__ import annotations

from dataclasses import dataclass

from kqp.protocol.errors import ProtocolError
from kqp.protocol.records import BodyError
from kqp.protocol.throttle import throttle_patch_parts
from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal, QuotaType
from kqp.quotas.throttle import combine, throttle_ms

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


class Throttling:
    __slots__ = ("cause", "muted_until", "mutes", "observer")

    def __init__(self, observer: ProxyObserver, mutes: MuteState) -> None:
        self.observer = observer
        self.mutes = mutes                  # the connection's; only this room touches THROTTLED in it
        self.muted_until = 0.0              # loop time the current mute lasts until
        self.cause: tuple[Principal, QuotaType] | None = None   # set exactly while the mute is on

    @property
    def muted(self) -> bool:
        return self.cause is not None

    def decide(self, entry: InFlight, violations: list[Violation]) -> Throttle | None:
        """KIP-124 co-existence: the request's one throttle, or None when nothing throttles it."""
        if not violations:
            return None
        seconds, quota_type = combine(violations)
        ms = throttle_ms(seconds)
        if not ms:
            return None
        assert quota_type is not None, "combine names the quota of any throttle above 0"
        return Throttle(ms, self._mute_seconds(entry, ms), entry.principal, quota_type)

    def _mute_seconds(self, entry: InFlight, ms: int) -> float:
        """How long a throttle of `ms` mutes the client: all of it, as Kafka's broker does.

        Issue 20 (pacing) decides here: a client that does not back off by itself (a request
        version without client-side throttling, `entry.api_version`; or a connection seen to ignore
        throttles) is muted for at most its request's own cost (`entry.produced` or
        `entry.fetched` bytes over the quota) while the full usage stays recorded."""
        return ms / 1000

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
        self._mute(throttle, now, out)

    def hold(self, throttle: Throttle | None, now: float, out: list[Action]) -> None:
        """Mute from `now` for a throttle known as the request is read; it is counted with the response."""
        if throttle is not None:
            self._mute(throttle, now, out)

    def _mute(self, throttle: Throttle, now: float, out: list[Action]) -> None:
        until = now + throttle.mute_seconds
        if until <= self.muted_until:   # an earlier, longer throttle holds the connection already
            return
        self.muted_until = until
        cause = (throttle.principal, throttle.quota_type)
        if cause != self.cause:
            self._end()
            self.cause = cause
            self.observer.mute_started(*cause)
        if self.mutes.mute(THROTTLED):
            out.append(Mute(THROTTLED))
        out.append(SetTimer(until))

    def timer_fired(self, now: float, out: list[Action]) -> bool:
        """The connection's timer: True when the mute has ended now (the core reads on)."""
        if self.cause is None:
            return False
        if now < self.muted_until:   # woken early: wait for the rest
            out.append(SetTimer(self.muted_until))
            return False
        self._end()
        if self.mutes.unmute(THROTTLED):
            out.append(Unmute(THROTTLED))
        return True

    def closed(self) -> None:
        """The connection closed: a mute in progress ends with it."""
        self._end()

    def _end(self) -> None:
        if self.cause is not None:
            self.observer.mute_ended(*self.cause)
            self.cause = None
