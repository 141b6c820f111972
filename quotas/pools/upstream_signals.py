"""What kqp measured of an upstream's health in one quota window, for one adaptive pool.

The measurements and nothing else, so the same numbers serve one process and a fleet:
`LatencyHistogram` (four logarithmic buckets per doubling from 1 ms, each value known within 9%;
buckets add up, so histograms of windows, brokers or processes merge exactly), `WindowSignals` (one
window's histograms per broker, the units delivered, counts of the harder signals; frozen and
mergeable) and `SignalCollector` (the mutable side the proxy feeds; `take` closes a window).

`counts_as_latency`: every Produce; a Fetch only when it returned records and the broker still had
more to give, for one that waited on `max_wait_ms` measured the producers, not the broker. Time is
always an argument here; nothing reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["LatencyHistogram", "SignalCollector", "WindowSignals", "counts_as_latency"]

BUCKET_BASE = 0.001        # seconds: the lower edge of bucket 0 (anything faster lands in it)
BUCKETS_PER_DOUBLING = 4   # bucket i covers [base * 2^(i/4), base * 2^((i+1)/4)): a factor 1.19
MAX_BUCKET = 80            # 2^20 ms, about 17 minutes: anything slower is "very slow" alike


def bucket_of(seconds: float) -> int:
    """The bucket a latency falls in (0 for anything at or below 1 ms)."""
    if seconds <= BUCKET_BASE:
        return 0
    return min(MAX_BUCKET, int(math.log2(seconds / BUCKET_BASE) * BUCKETS_PER_DOUBLING))


def bucket_value(bucket: int) -> float:
    """The value a bucket stands for: its geometric middle, within 9% of anything in it."""
    return BUCKET_BASE * 2.0 ** ((bucket + 0.5) / BUCKETS_PER_DOUBLING)


class LatencyHistogram:
    """Counts of latency samples per logarithmic bucket; see the module docstring."""

    __slots__ = ("counts", "total")

    def __init__(self, counts: Mapping[int, int] | None = None) -> None:
        self.counts: dict[int, int] = dict(counts or {})
        self.total = sum(self.counts.values())

    def record(self, seconds: float, count: int = 1) -> None:
        b = bucket_of(seconds)
        self.counts[b] = self.counts.get(b, 0) + count
        self.total += count

    def add(self, other: LatencyHistogram) -> None:
        for b, n in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + n
        self.total += other.total

    def quantile(self, q: float) -> float | None:
        """The value below which a fraction `q` of the samples lie (None when empty).

        The sample of rank ceil(q * total) (1-based), reported as its bucket's middle: the median
        of 5 samples is the 3rd, so 2 slow samples out of 5 cannot move it.
        """
        if self.total == 0:
            return None
        rank = max(1, math.ceil(q * self.total))
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return bucket_value(b)
        raise AssertionError("counts do not add up to total")   # pragma: no cover - our own invariant

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LatencyHistogram) and self.counts == other.counts

    def __repr__(self) -> str:
        return f"LatencyHistogram({dict(sorted(self.counts.items()))})"


@dataclass(frozen=True, slots=True)
class WindowSignals:
    """One quota window of one adaptive pool, as measured by one process or merged over a fleet."""

    seconds: float                                   # the window's length
    latency: Mapping[int, LatencyHistogram] = field(default_factory=dict)   # broker id -> samples
    delivered: float = 0.0          # units (bytes...) the pool's answered requests carried
    throttled: int = 0              # answers carrying the upstream's own throttle_time_ms > 0
    timeouts: int = 0               # requests the upstream did not answer in time
    disconnects: int = 0            # upstream connections lost with requests of the pool in flight
    stalled: float = 0.0            # the oldest unanswered Produce's age at the window's end (s)

    @property
    def delivered_rate(self) -> float:
        return self.delivered / self.seconds if self.seconds > 0 else 0.0

    @property
    def samples(self) -> int:
        return sum(h.total for h in self.latency.values())

    @staticmethod
    def merged(parts: Iterable[WindowSignals]) -> WindowSignals:
        """The fleet's window: the same window measured by several processes, summed (the oldest
        stall is the fleet's stall)."""
        parts = list(parts)
        if not parts:
            raise ValueError("nothing to merge")
        latency: dict[int, LatencyHistogram] = {}
        for part in parts:
            for broker, histogram in part.latency.items():
                latency.setdefault(broker, LatencyHistogram()).add(histogram)
        return WindowSignals(parts[0].seconds, latency, sum(p.delivered for p in parts),
                             sum(p.throttled for p in parts), sum(p.timeouts for p in parts),
                             sum(p.disconnects for p in parts), max(p.stalled for p in parts))


class SignalCollector:
    """The window under way: fed by the proxy per response, closed once per window by `take`."""

    __slots__ = ("_latency", "delivered", "disconnects", "throttled", "timeouts")

    def __init__(self) -> None:
        self._latency: dict[int, LatencyHistogram] = {}
        self.delivered = 0.0
        self.throttled = 0
        self.timeouts = 0
        self.disconnects = 0

    def response(self, broker: int, latency: float | None, units: float, upstream_throttle_ms: int = 0) -> None:
        """An answered request of the pool: its latency (None: it does not count, see
        `counts_as_latency`), the units it delivered, and the upstream's own throttle on it."""
        if latency is not None:
            histogram = self._latency.get(broker)
            if histogram is None:
                histogram = self._latency[broker] = LatencyHistogram()
            histogram.record(latency)
        self.delivered += units
        if upstream_throttle_ms > 0:
            self.throttled += 1

    @property
    def empty(self) -> bool:
        """Nothing answered and nothing went wrong since the last `take`."""
        return not (self._latency or self.delivered or self.throttled or self.timeouts or self.disconnects)

    def timeout(self) -> None:
        self.timeouts += 1

    def disconnect(self) -> None:
        self.disconnects += 1

    def take(self, seconds: float, stalled: float = 0.0) -> WindowSignals:
        """Close the window (`seconds` long; `stalled`: the oldest unanswered Produce's age now)."""
        signals = WindowSignals(seconds, self._latency, self.delivered, self.throttled, self.timeouts,
                                self.disconnects, stalled)
        self._latency = {}
        self.delivered = 0.0
        self.throttled = self.timeouts = self.disconnects = 0
        return signals


def counts_as_latency(is_fetch: bool, records: int, more_available: bool) -> bool:
    """Whether an answered request's time is the broker's (module docstring): every Produce; a
    Fetch only when it returned records and some partition had more beyond them (the consumer is
    behind, so the broker answered without waiting for data)."""
    return not is_fetch or (records > 0 and more_available)
