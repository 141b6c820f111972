"""A hand-cranked event loop for testing kqp's asyncio drivers without sleeps.

uvicorn's way: the delay driver takes its loop through its constructor, so a test hands it a loop
whose clock moves only when told to and whose timers fire only when the test advances time. (The
connection core needs no loop at all: its tests are playbooks, helpers.playbook.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class FakeTimer:
    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """`time()` and `call_at()` only; `advance(t)` runs due timers in deadline order, as asyncio does."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> FakeTimer:
        timer = FakeTimer(when, callback, args)
        self.timers.append(timer)
        return timer

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> FakeTimer:
        return self.call_at(self.now + delay, callback, *args)

    @property
    def pending(self) -> list[FakeTimer]:
        return sorted((t for t in self.timers if not t.cancelled), key=lambda t: t.when)

    def advance(self, to: float, *, fire_at: float | None = None) -> None:
        """Move the clock to `to`, firing every timer due by then (each with the clock at `fire_at`
        if given, to imitate a loop that wakes a little early or late)."""
        for _ in range(10_000):   # bounded: a timer that re-arms itself forever is a bug
            due = [t for t in self.pending if t.when <= to]
            if not due:
                break
            timer = due[0]
            self.timers.remove(timer)
            self.now = max(self.now, timer.when if fire_at is None else fire_at)
            timer.callback(*timer.args)
        else:
            raise AssertionError("timers kept re-arming at or before the target time")
        self.now = max(self.now, to)
