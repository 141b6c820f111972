"""DelayDriver: one loop timer for the whole process's throttled connections, driven by a fake loop.

The pure heap is tested in tests/quotas; here the asyncio edge: exactly one timer armed at the
earliest deadline, items woken with the loop's time, cancellation, re-arming from inside a wake-up,
and a loop that wakes a little early (uvloop rounds timers to milliseconds) losing nothing.
"""

from __future__ import annotations

from helpers.quota_fakes import FakeLoop

from kqp.proxy.runtime.delay import DelayDriver


class Conn:
    def __init__(self, name: str, woken: list[tuple[str, float]]) -> None:
        self.name = name
        self.woken = woken
        self.again: tuple[DelayDriver, float] | None = None

    def on_delay(self, now: float) -> None:
        self.woken.append((self.name, now))
        if self.again is not None:
            driver, until = self.again
            self.again = None
            driver.schedule(self, until)


def setup() -> tuple[FakeLoop, DelayDriver, list[tuple[str, float]]]:
    loop = FakeLoop(start=0.0)
    return loop, DelayDriver(loop), []  # type: ignore[arg-type]


def test_items_wake_in_deadline_order_with_one_timer_armed() -> None:
    loop, driver, woken = setup()
    driver.schedule(Conn("late", woken), 2.0)
    driver.schedule(Conn("early", woken), 1.0)      # earlier: the timer moves to 1.0
    driver.schedule(Conn("later", woken), 3.0)      # later: the timer stays
    assert [t.when for t in loop.pending] == [1.0]
    loop.advance(1.5)
    assert woken == [("early", 1.0)]
    assert [t.when for t in loop.pending] == [2.0], "the driver re-arms for the next deadline"
    loop.advance(5.0)
    assert woken == [("early", 1.0), ("late", 2.0), ("later", 3.0)]
    assert loop.pending == [] and len(driver) == 0


def test_cancelled_item_is_not_woken() -> None:
    loop, driver, woken = setup()
    handle = driver.schedule(Conn("gone", woken), 1.0)
    driver.schedule(Conn("kept", woken), 1.0)
    driver.cancel(handle)
    assert len(driver) == 1
    loop.advance(2.0)
    assert woken == [("kept", 1.0)]


def test_early_wake_up_loses_nothing() -> None:
    loop, driver, woken = setup()
    driver.schedule(Conn("a", woken), 1.0)
    # The loop fires the 1.0 timer with its clock at 0.9995: nothing is due yet...
    loop.advance(0.9995, fire_at=0.9995)
    assert woken == []
    assert [t.when for t in loop.pending] == [1.0], "...so the driver must arm again, not forget"
    loop.advance(1.0)
    assert woken == [("a", 1.0)]


def test_an_item_rescheduled_from_its_wake_up_is_woken_again() -> None:
    loop, driver, woken = setup()
    conn = Conn("again", woken)
    conn.again = (driver, 1.5)                      # e.g. a held response released, a new mute
    driver.schedule(conn, 1.0)
    driver.schedule(Conn("other", woken), 2.0)
    loop.advance(3.0)
    assert woken == [("again", 1.0), ("again", 1.5), ("other", 2.0)]
    assert len([t for t in loop.timers if not t.cancelled]) == 0


def test_close_cancels_the_timer() -> None:
    loop, driver, woken = setup()
    driver.schedule(Conn("a", woken), 1.0)
    driver.close()
    loop.advance(2.0)
    assert woken == []
