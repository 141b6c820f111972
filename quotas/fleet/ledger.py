"""One quota for a fleet: what a kqp process tells the others about its usage, and how it merges theirs.

In cluster scope (and across `--workers`) every process keeps measuring locally, on the fast path;
in addition each sensor's usage is cut into windows of fleet time (the store's clock, tracked as an
offset from the local monotonic one), and once per sync interval the `FleetLedger` sends each active
sensor's new usage per window to the store and gets back the fleet's totals. Nothing here waits for
the store: the driver runs the exchange off the request path; this module only says what to send
(`collect`) and what to make of the answer (`merge`, `failed`).

A shared rate is this process's own samples plus the others' usage, over Kafka's `Rate.windowSize`
of the own samples; what the others used since the last exchange is estimated by symmetry. Token
buckets are shared as their spending. Unreachable or stale, the ledger is alone: each quota at its
share. A store in parts (a Redis Cluster's slot groups) carries an epoch per part. The reasons and
the simulated bounds are in quotas/README.md ("The fleet ledger"). Time is always an argument.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from kqp.quotas.model import QuotaKey, QuotaType

UNHEARD = -1   # `SharedUsage.others_active` before the sensor's first exchange: see `remote`
CLOCK_SAMPLES = 8   # exchanges whose clock readings are kept; the quickest one sets the offset (NTP's filter)

__all__ = ["ExchangeIncomplete", "FleetLedger", "SensorTotals", "SensorUsage", "SharedUsage", "SyncReply",
           "SyncRequest", "sensor_name"]


@dataclass(frozen=True, slots=True)
class SensorUsage:
    """One sensor in an exchange: its fleet-wide name and the usage to add per window index."""

    name: str
    deltas: tuple[tuple[int, float], ...]   # may be empty: the sensor is only read


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """What one process sends per sync interval (one round trip, whatever the number of sensors)."""

    instance: str
    epoch: str            # a new epoch, unique to this request, kept by the store only if it has none
    window_ms: int        # window width; part of every key, so differently configured fleets never mix
    keep_windows: int     # windows the store keeps per sensor, counted back from its current one
    live_ms: int          # an instance counts as present this long after its last exchange
    active_ms: int        # an instance counts as using a sensor this long after it last added to it
    ttl_ms: int           # a sensor nobody touched for this long is deleted
    sensors: tuple[SensorUsage, ...]


@dataclass(frozen=True, slots=True)
class SensorTotals:
    """One sensor in the store's answer: the fleet's usage per window, and who else is using it."""

    windows: dict[int, float]    # window -> the fleet's total usage in it
    others_active: int           # other instances that added usage to the sensor within the last span
    epoch: str | None = None     # the epoch of the store part holding the sensor; None: the reply's


@dataclass(frozen=True, slots=True)
class SyncReply:
    """The store's answer: its epoch and clock, the instances present, each sensor's totals."""

    epoch: str                                  # changes when the store lost its data (a restarted Redis)
    now: float                                  # the store's clock (fleet time), seconds
    instances: int
    sensors: tuple[SensorTotals, ...]           # per request sensor, in request order


class ExchangeIncomplete(Exception):
    """Part of the store applied its share of the request and part did not (a Redis Cluster shard
    down): `sensors` holds, in request order, the totals of each sensor that was applied, None for
    the others; the message says what failed."""

    def __init__(self, sensors: tuple[SensorTotals | None, ...], message: str) -> None:
        super().__init__(message)
        self.sensors = sensors


def sensor_name(quota_type: QuotaType, key: QuotaKey) -> str:
    """A sensor's name in the store: unambiguous for any user or client id (they are percent-quoted).

    A prefix group's is ``type:user:prefix=<quoted prefix>``: quoting turns a client id's own "="
    into %3D, so no client id's name can read as a group's.
    """
    if key.client_id_prefix is not None:
        return f"{quota_type}:{quote(key.user, safe='')}:prefix={quote(key.client_id_prefix, safe='')}"
    return f"{quota_type}:{quote(key.user, safe='')}:{quote(key.client_id, safe='')}"


class SharedUsage:
    """One sensor's share of the exchange: usage not yet sent, usage sent, and the others' usage."""

    __slots__ = ("_cache", "busy_until", "epoch", "in_flight", "ledger", "name", "on_others", "others",
                 "others_active", "pending", "seen", "sent", "since", "watched")

    def __init__(self, ledger: FleetLedger, name: str, now: float) -> None:
        self.ledger = ledger
        self.name = name
        self.pending: dict[int, float] = {}   # window -> usage recorded here, not sent yet
        self.since = 0.0                      # usage recorded here since the last exchange was collected
        self.in_flight = 0.0                  # usage recorded between the last two collects, until merged
        self.sent: dict[int, float] = {}      # window -> usage this process has added to the store
        self.others: dict[int, float] = {}    # window -> the other processes' usage, as of the last exchange
        self.others_active = UNHEARD          # other processes using this sensor, as of the last exchange
        self.seen: dict[int, float] = {}      # window -> others' usage already handed to `on_others`
        self.on_others: Callable[[float, float], None] | None = None   # token bucket replica: (usage, now)
        self.busy_until = now                 # until when this process's clients may still use the sensor
        self.epoch: str | None = None         # the epoch of the store part holding `sent`, as last seen
        self.watched = False                  # read every exchange even while unused here (a pool's members)
        self._cache: tuple[int, int, float] = (-1, 0, 0.0)   # (generation, window, others' total)

    def record(self, value: float, now: float) -> None:
        """Usage recorded by this process: counted at once locally, sent with the next exchange."""
        ledger = self.ledger
        window = int((now + ledger.offset) * ledger.windows_per_second)   # ledger.window_index, inlined
        self.pending[window] = self.pending.get(window, 0.0) + value
        self.since += value
        if now > self.busy_until:
            self.busy_until = now

    def throttled(self, until: float) -> None:
        """A client of this process is muted until `until`: it will be back, so keep the sensor in
        the exchange meanwhile (a client returning from a long throttle to a sensor that had dropped
        out would see none of the fleet's usage and burst until the next exchange)."""
        if until > self.busy_until:
            self.busy_until = until

    def remote(self, now: float) -> float:
        """The others' usage inside the measured span: as of the last exchange, plus the estimate of
        what they used since (each other active process as much as this one since the exchange the
        reply reflects: the usage of an exchange still in flight counts too).

        A window w is inside the span while it may still hold an event less than
        window_count x window_size old: w >= current - window_count, the window_count + 1 windows
        Kafka's SampledStat keeps. 0 while the ledger is alone. A sensor that has not heard from the
        fleet yet (new, or back from idle) counts every other process present as active on it.
        """
        ledger = self.ledger
        if not ledger.shared:
            return 0.0
        current = int((now + ledger.offset) * ledger.windows_per_second)   # ledger.window_index, inlined
        generation, at, total = self._cache
        if generation != ledger.generation or at != current:
            first = current - ledger.window_count
            total = sum(used for window, used in self.others.items() if window >= first)
            self._cache = (ledger.generation, current, total)
        active = self.others_active
        if active < 0:   # UNHEARD
            active = ledger.divisor - 1
        return total + active * (self.since + self.in_flight)

    def _prune(self, first: int) -> None:
        for table in (self.pending, self.sent, self.others, self.seen):
            for window in [w for w in table if w < first]:
                del table[window]


class FleetLedger:
    """Every shared sensor of one process, the fleet clock offset, and whether the fleet is reachable."""

    def __init__(self, instance: str, epoch: str, window_size: float, window_count: int,
                 expected_instances: int, sync_interval: float, clock_offset: float = 0.0,
                 timeout: float = 0.25) -> None:
        self.instance = instance
        self._epoch_proposal = epoch
        self._exchanges = 0
        self.expected_instances = max(1, expected_instances)
        self.sync_interval = sync_interval
        # A driver that runs exchanges one interval apart, each bounded by `timeout`, succeeds at
        # least this often; a view older than that means this process's event loop is starved (or
        # the store slow): `check` then goes alone, as a failed exchange does. One late wake-up of
        # the driver (another interval) is tolerated.
        self.stale_after = 2 * sync_interval + timeout
        self.offset = clock_offset           # fleet time - local time, refined at every exchange
        self._clock_samples: deque[tuple[float, float]] = deque(maxlen=CLOCK_SAMPLES)   # (round trip, offset)
        self._clock_epoch: str | None = None   # the epoch the clock samples were read under
        self.shared = False                  # True while the last exchange succeeded
        self.instances = 0                   # instances the last successful exchange counted
        self.generation = 0                  # bumped whenever `others` or `shared` change
        self.last_success: float | None = None
        self.usages: dict[str, SharedUsage] = {}
        self.scale = 1.0                     # fraction of each limit enforced alone: 1 when shared, 1/divisor
        self._set_scale()
        self.configure(window_size, window_count)

    # -- settings ----------------------------------------------------------------------------------
    def configure(self, window_size: float, window_count: int) -> None:
        """New quota windows: every window index changes meaning, so all sharing restarts empty."""
        self.window_size = float(window_size)
        self.window_count = int(window_count)
        self.window_ms = max(1, round(self.window_size * 1000))
        self.windows_per_second = 1000 / self.window_ms
        self.span = self.window_size * self.window_count
        self.usages = {}
        self._first = 0                      # oldest window `sent` and `seen` still track (see `collect`)
        self.generation += 1

    @property
    def divisor(self) -> int:
        """How many ways each quota is split while alone: the instances last seen, else expected."""
        return self.instances if self.instances > 0 else self.expected_instances

    def _set_scale(self) -> None:
        # A plain attribute, not a property: every shared quota check reads it.
        self.scale = 1.0 if self.shared else 1.0 / self.divisor

    def check(self, now: float) -> None:
        """Go alone if the fleet's view has grown stale (see `stale_after`): called before every
        quota check, so a client served by a loop that ran nothing for a while (the exchange task
        included) is held to this process's share, not to the fleet's usage of seconds ago."""
        if self.shared and now - self.last_success > self.stale_after:   # type: ignore[operator]
            self.shared = False
            self._set_scale()
            self.generation += 1

    def window_index(self, now: float) -> int:
        # Fleet time is a wall clock reading, never negative: int() is floor() here, and cheaper.
        return int((now + self.offset) * self.windows_per_second)

    # -- sensors -----------------------------------------------------------------------------------
    def usage_for(self, name: str, now: float) -> SharedUsage:
        """The shared part of a sensor; a sensor created again (after expiry) takes up its old one."""
        usage = self.usages.get(name)
        if usage is None:
            usage = self.usages[name] = SharedUsage(self, name, now)
        return usage

    def forget(self, name: str) -> None:
        """The sensor was released (idle expiry, quota removed): nothing more of it is exchanged."""
        self.usages.pop(name, None)

    # -- the exchange --------------------------------------------------------------------------------
    def collect(self, now: float) -> SyncRequest:
        """The next exchange: each active sensor's pending usage, moved to "in flight".

        A sensor is active while it recorded here, or muted a client here, within the last span, or
        still has usage to send, or is `watched` (a pool reads the fleet's usage of members it may not
        serve itself); an inactive one is neither sent nor read, and its view of the others is dropped
        (a client that comes back is measured afresh from the next exchange on).
        """
        # Never back: a clock correction that moves fleet time back across a window boundary must
        # not bring back a window whose `sent` and `seen` are gone (see `merge`).
        first = self._first = max(self._first, self.window_index(now) - self.window_count - 1)
        sensors: list[SensorUsage] = []
        for usage in self.usages.values():
            usage._prune(first)
            if now - usage.busy_until >= self.span and not usage.pending and not usage.watched:
                if usage.others or usage.others_active != UNHEARD:
                    usage.others = {}
                    usage.others_active = UNHEARD
                    self.generation += 1
                continue
            sensors.append(SensorUsage(usage.name, tuple(sorted(usage.pending.items()))))
            usage.pending = {}
            usage.in_flight = usage.since
            usage.since = 0.0
        # Present: heard from within 10 sync intervals (at least 1 s). Kept: twice the span, so a
        # sensor outlives a few failed exchanges of its writers.
        live = max(10 * self.sync_interval, 1.0)
        # Every proposal is new: a store that lost its epoch must never take one seen before.
        self._exchanges += 1
        return SyncRequest(
            instance=self.instance, epoch=f"{self._epoch_proposal}.{self._exchanges}", window_ms=self.window_ms,
            keep_windows=self.window_count + 2, live_ms=round(live * 1000), active_ms=round(self.span * 1000),
            ttl_ms=round(max(2 * self.span, live) * 1000), sensors=tuple(sensors),
        )

    def merge(self, request: SyncRequest, reply: SyncReply, sent_at: float, received_at: float) -> None:
        """Take in a successful exchange: clock offset, store epoch, the others' usage per sensor."""
        if self._clock_epoch is not None and reply.epoch != self._clock_epoch:
            self._clock_samples.clear()   # perhaps another Redis, with another clock
        self._clock_epoch = reply.epoch
        # The reply was read at `received_at`, which a busy event loop makes late: the exchange with
        # the shortest round trip of the last few gives the truest offset (NTP's clock filter).
        self._clock_samples.append((received_at - sent_at, reply.now - (sent_at + received_at) / 2))
        self.offset = min(self._clock_samples)[1]
        # The store keeps one window more than `collect` kept of `sent` and `seen`: in that window
        # this process's own usage would read as the others', and a token bucket replica would be
        # debited with it again at every exchange. Only the windows still tracked here count: those
        # `collect` kept, whatever the new offset makes of `sent_at`.
        first = self._first
        for item, totals in zip(request.sensors, reply.sensors, strict=True):
            usage = self.usages.get(item.name)
            if usage is None:
                continue   # released while the exchange was under way
            _settle(usage, item, totals.epoch or reply.epoch)
            others = {w: total - usage.sent.get(w, 0.0) for w, total in totals.windows.items() if w >= first}
            usage.others = {w: used for w, used in others.items() if used > 1e-9}
            usage.others_active = totals.others_active
            usage.in_flight = 0.0
            if usage.on_others is not None:
                increase = 0.0
                for window, used in usage.others.items():
                    increase += used - usage.seen.get(window, 0.0)
                    usage.seen[window] = used
                if increase:
                    usage.on_others(increase, received_at)
        self.instances = max(1, reply.instances)
        self.shared = True
        self._set_scale()
        self.last_success = received_at
        self.generation += 1

    def failed(self, request: SyncRequest, applied: tuple[SensorTotals | None, ...] | None = None) -> None:
        """The exchange failed or timed out: keep its usage for the next one, and go alone.

        `applied` (an `ExchangeIncomplete`'s): the sensors a part of the store did take, which are
        sent, not kept; only the others' usage is sent again.
        """
        for i, item in enumerate(request.sensors):
            usage = self.usages.get(item.name)
            if usage is None:
                continue
            # No reply: the usage the exchange carried counts as not yet seen by the fleet again.
            usage.since += usage.in_flight
            usage.in_flight = 0.0
            totals = applied[i] if applied is not None else None
            if totals is not None:
                _settle(usage, item, totals.epoch)
                continue
            for window, delta in item.deltas:
                usage.pending[window] = usage.pending.get(window, 0.0) + delta
        if self.shared:
            self.shared = False
            self._set_scale()
            self.generation += 1


def _settle(usage: SharedUsage, item: SensorUsage, epoch: str | None) -> None:
    """The store part holding the sensor took `item`'s deltas: they are sent. If that part's epoch
    changed it lost everything sent to it before: all of that is sent again with the next exchange.
    (`epoch` None: not told, taken as unchanged.)"""
    if epoch is not None:
        if usage.epoch is not None and epoch != usage.epoch:
            for window, used in usage.sent.items():
                usage.pending[window] = usage.pending.get(window, 0.0) + used
            usage.sent = {}
        usage.epoch = epoch
    for window, delta in item.deltas:
        usage.sent[window] = usage.sent.get(window, 0.0) + delta
