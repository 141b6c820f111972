"""The asyncio driver of the process-wide delay queue (KIP-219's throttled-channel reaper).

The queue itself (`kqp.quotas.delay_queue`) is a pure heap stepped with `pop_expired(now)`; this
driver only keeps one `loop.call_at` timer armed at the earliest deadline. No task sleeps per
connection: throttling n connections costs O(log n) per mute. Deadlines and the `now` handed to a
due item are the loop's clock (`loop.time()`), the same clock every connection event carries.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from kqp.quotas.delay_queue import DelayQueue


class Delayed(Protocol):
    def on_delay(self, now: float) -> None: ...


class DelayDriver:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.queue: DelayQueue[Delayed] = DelayQueue()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")

    def schedule(self, item: Delayed, until: float) -> object:
        handle = self.queue.add(item, until)
        if until < self._timer_at:
            self._arm(until)
        return handle

    def cancel(self, handle: object) -> None:
        self.queue.cancel(handle)  # lazy; an early wake-up just finds nothing due

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        now = self._loop.time()
        for item in self.queue.pop_expired(now):
            item.on_delay(now)
        nxt = self.queue.next_deadline()
        if nxt is not None:
            self._arm(nxt)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __len__(self) -> int:
        return len(self.queue)
