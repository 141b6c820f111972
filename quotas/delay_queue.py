"""The process-wide delay queue of throttled channels (KIP-219), as a pure step.

Kafka keeps throttled channels in a `java.util.concurrent.DelayQueue` drained by a reaper thread.
kqp keeps one heap for the whole process and steps it with an explicit clock: the proxy's asyncio
driver arms a single `loop.call_at` at `next_deadline()` and calls `pop_expired(now)` when it
fires, so throttling n connections costs one timer and O(log n) per entry, never a sleeping task
per connection. Tests step it with a fake clock.

Cancellation is lazy: `cancel` marks the entry dead in O(1) and the heap drops it when it surfaces.
So that a stream of cancellations cannot grow the heap without bound, the heap is rebuilt from its
live entries once dead ones outnumber them (amortised O(1) per cancel).

Entries with equal deadlines come out in insertion order (a sequence number breaks ties), so
channels throttled for the same time are released in the order they were throttled.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

# Below this many dead entries compaction is not worth its O(n).
_COMPACT_MIN_DEAD = 64


class Handle(Generic[T]):
    """One scheduled entry; pass it to `DelayQueue.cancel`."""

    __slots__ = ("deadline", "item", "live", "seq")

    def __init__(self, deadline: float, seq: int, item: T) -> None:
        self.deadline = deadline
        self.seq = seq
        self.item = item
        self.live = True

    def __repr__(self) -> str:
        state = "live" if self.live else "done"
        return f"Handle(deadline={self.deadline}, seq={self.seq}, {state})"


class DelayQueue(Generic[T]):
    """Items due at deadlines, popped in deadline order; ties in insertion order."""

    __slots__ = ("_dead", "_heap", "_live", "_seq")

    def __init__(self) -> None:
        # (deadline, seq, handle): seq is unique, so handles themselves are never compared.
        self._heap: list[tuple[float, int, Handle[T]]] = []
        self._seq = itertools.count()
        self._live = 0
        self._dead = 0

    def add(self, item: T, until: float) -> Handle[T]:
        """Schedule `item` for `until` (same clock as `pop_expired`'s `now`). O(log n)."""
        seq = next(self._seq)
        handle = Handle(until, seq, item)
        heapq.heappush(self._heap, (until, seq, handle))
        self._live += 1
        return handle

    def cancel(self, handle: Handle[T]) -> None:
        """Forget a scheduled entry. O(1); cancelling twice, or after it popped, does nothing."""
        if not handle.live:
            return
        handle.live = False
        handle.item = None  # type: ignore[assignment]  # let go of: the heap may keep a dead entry a while
        self._live -= 1
        self._dead += 1
        if self._dead >= _COMPACT_MIN_DEAD and self._dead > self._live:
            self._compact()

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if entry[2].live]
        heapq.heapify(self._heap)
        self._dead = 0

    def _drop_dead_top(self) -> None:
        heap = self._heap
        while heap and not heap[0][2].live:
            heapq.heappop(heap)
            self._dead -= 1

    def pop_expired(self, now: float) -> list[T]:
        """Remove and return every live item due at or before `now`, in deadline order."""
        heap = self._heap
        due: list[T] = []
        while heap and heap[0][0] <= now:
            _, _, handle = heapq.heappop(heap)
            if handle.live:
                handle.live = False
                self._live -= 1
                due.append(handle.item)
            else:
                self._dead -= 1
        return due

    def next_deadline(self) -> float | None:
        """The earliest live deadline, or None when nothing is scheduled."""
        self._drop_dead_top()
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        """Live entries (cancelled ones do not count even before the heap drops them)."""
        return self._live

    def count_by(self, key: Callable[[T], str]) -> dict[str, int]:
        """Live entries per `key(item)`, e.g. per quota type for a queue-size gauge. O(n)."""
        counts: dict[str, int] = {}
        for _, _, handle in self._heap:
            if handle.live:
                label = key(handle.item)
                counts[label] = counts.get(label, 0) + 1
        return counts
