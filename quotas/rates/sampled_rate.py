"""Kafka's windowed rate (`Rate` over a `WindowedSum` `SampledStat`), with an explicit clock.

kqp promises the throttle times a broker would compute, and those depend on Kafka's details rather
than on a simpler moving average: samples start at event times, `window_count + 1` slots rotate,
samples a span old are purged before each measurement, and the rate divides by `Rate.windowSize`,
never less than `window_count - 1` full windows plus the current one's elapsed part (which is what
keeps a fresh entity's first burst from reading as an enormous rate). quotas/README.md ("The
sampled rate") spells each rule out.

Memory: one flat `array('d')` of `(window_count + 1) * 3` floats (value, start, last event per
slot), so ten thousand sensors cost a few megabytes; measuring sums at most `window_count + 1`
slots. `surely_below` spares that sum where it cannot matter: while no sample can have expired
since the last one, and what was recorded since would keep the rate under a limit even over the
shortest window, the measurement would say so and purge nothing.
"""

from __future__ import annotations

import math
from array import array

_VALUE, _START, _LAST = 0, 1, 2
_STRIDE = 3
# Kafka's Rate.windowSize returns at least 1 ms so that a rate measured at the very start of a
# window with no history is defined.
MIN_WINDOW_SECONDS = 0.001


class SampledRate:
    """Units per second over `window_count` samples of `window_size_seconds` (Kafka's `Rate`)."""

    __slots__ = ("_current", "_data", "_expire_age", "_fresh_until", "_min_full", "_min_span", "_size", "_slots",
                 "_upper", "_window")

    def __init__(self, window_size_seconds: float, window_count: int) -> None:
        if not window_size_seconds > 0:
            raise ValueError(f"window_size_seconds must be > 0, got {window_size_seconds}")
        if window_count < 1:
            raise ValueError(f"window_count must be >= 1, got {window_count}")
        self._window = float(window_size_seconds)
        self._slots = window_count + 1
        self._min_full = window_count - 1  # prior windows assumed present besides the current one
        self._expire_age = window_count * self._window
        # The shortest window a rate is ever computed over (`_span`), a hair shorter for rounding.
        self._min_span = max(self._min_full * self._window, MIN_WINDOW_SECONDS) * (1 - 1e-9)
        self._upper = 0.0                  # at least the samples' sum (exact at the last scan)
        self._fresh_until = -math.inf      # no sample can expire before this (the last scan's oldest event + age)
        self._data = array("d", [0.0]) * (self._slots * _STRIDE)
        # Kafka's sample list grows lazily up to `slots`; slots past `_size` have never been used
        # and must not count as "oldest".
        self._size = 0
        self._current = 0

    def _first(self, now: float) -> None:
        if self._size == 0:
            self._size = 1
            self._current = 0
            self._reset(0, now)

    def _reset(self, slot: int, now: float) -> None:
        i = slot * _STRIDE
        d = self._data
        d[i + _VALUE] = 0.0
        d[i + _START] = now
        d[i + _LAST] = now

    def record(self, value: float, now: float) -> None:
        """Add `value` at time `now` (SampledStat.record: no purge, no quota check)."""
        self._first(now)
        d = self._data
        i = self._current * _STRIDE
        if now - d[i + _START] >= self._window:
            # The current sample is complete: recycle the next slot (the oldest) for a new one.
            self._current = (self._current + 1) % self._slots
            if self._current >= self._size:
                self._size += 1
            elif d[self._current * _STRIDE + _VALUE] < 0:   # a refund's negative sample dropped: the sum grows
                self._upper -= d[self._current * _STRIDE + _VALUE]
            self._reset(self._current, now)
            i = self._current * _STRIDE
        d[i + _VALUE] += value
        d[i + _LAST] = now
        self._upper += value

    def surely_below(self, limit: float, now: float, pending: float = 0.0) -> bool:
        """True when the rate at `now` is surely at most `limit`, even with `pending` more recorded, and
        measuring it would purge nothing."""
        return now < self._fresh_until and self._upper + pending <= limit * self._min_span

    def _scan(self, now: float) -> tuple[float, float]:
        """Purge, then return (sum of samples, start of the oldest): one pass over the slots.

        Kafka purges samples whose last event is `window_count * window_size` or more old, and
        keeps those overlapping the monitored span even if they started before it.
        """
        d = self._data
        age = self._expire_age
        total = 0.0
        oldest = last = now
        for i in range(0, self._size * _STRIDE, _STRIDE):
            if now - d[i + _LAST] >= age:
                d[i + _VALUE] = 0.0
                d[i + _START] = now
                d[i + _LAST] = now
                continue
            total += d[i + _VALUE]
            start = d[i + _START]
            if start < oldest:
                oldest = start
            if d[i + _LAST] < last:
                last = d[i + _LAST]
        self._upper, self._fresh_until = total, last + age
        return total, oldest

    def _span(self, now: float, oldest: float) -> float:
        elapsed = now - oldest
        full = math.floor(elapsed / self._window)
        if full < self._min_full:
            elapsed += (self._min_full - full) * self._window
        return max(elapsed, MIN_WINDOW_SECONDS)

    def window_size(self, now: float) -> float:
        """Seconds the rate is computed over (Kafka's `Rate.windowSize`)."""
        self._first(now)  # Kafka's SampledStat.oldest creates the first sample when none exists
        return self._span(now, self._scan(now)[1])

    def total(self, now: float) -> float:
        """The sum of the monitored samples after purging (Kafka's `WindowedSum.measure`)."""
        return self._scan(now)[0]

    def observe(self, now: float, elsewhere: float = 0.0) -> tuple[float, float]:
        """`(measure(now), window_size(now))` in one pass: what a quota check needs.

        `elsewhere` is usage measured outside these samples (the rest of a fleet's, fleet/ledger.py) over
        the same span: it is added to the samples' sum, and the window stays these samples' own.
        """
        self._first(now)
        total, oldest = self._scan(now)
        window = self._span(now, oldest)
        return (total + elsewhere) / window, window

    def measure(self, now: float) -> float:
        """Units per second (Kafka's `Rate.measure`)."""
        return self.observe(now)[0]

    def scale(self, factor: float) -> None:
        """Multiply every sample by `factor` (a pool member's quota changed: pools/ledger.py)."""
        d = self._data
        for i in range(_VALUE, self._size * _STRIDE, _STRIDE):
            d[i] *= factor
        self._fresh_until = -math.inf   # the next measurement sums them again
