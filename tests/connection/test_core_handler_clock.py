"""Which clock times the core's handlers, and how often: the loop thread's CPU clock while
request_percentage is charged (a request preempted by another process on a busy host costs its client
no more), the wall clock otherwise (cheaper to read); frames of one read share their readings. Both
clocks are injected, so each test tells them apart."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from helpers.playbook import Recorder, connected_core, produce_frame, produce_response

from kqp.config.loader import parse_config
from kqp.proxy.connection import events as ev
from kqp.quotas.model import Principal

NOW = 100.0


class HandlerTimes(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []

    def handler_time(self, principal: Principal, seconds: float) -> None:
        self.seconds.append(seconds)


def ticking(step: float) -> Callable[[], float]:
    """A clock that moves `step` each time it is read."""
    return itertools.count(0.0, step).__next__


def exchange(quota: dict[str, float]) -> list[float]:
    """One Produce and its response through a core whose wall clock moves 1 s a read, its CPU clock 1 ms."""
    observer = HandlerTimes()
    core = connected_core({"entities": [{"client_id": "c", **quota}]}, observer=observer)
    core.wiring.perf, core.wiring.cpu = ticking(1.0), ticking(0.001)
    sent = core.handle(ev.ClientData(NOW, produce_frame("t", 9, 1, "c", records=2, acks=1)))
    assert [a.side for a in sent if isinstance(a, ev.Send)] == [ev.Side.UPSTREAM], sent
    back = core.handle(ev.UpstreamData(NOW, produce_response(9, 1)))
    assert [a.side for a in back if isinstance(a, ev.Send)] == [ev.Side.CLIENT], back
    return observer.seconds


def test_handler_time_is_cpu_time_while_request_percentage_is_charged() -> None:
    # request side one read to the next, response side the same: 2 ms of CPU, not 2 s of wall time
    assert exchange({"request_percentage": 1e6}) == [pytest.approx(0.002)]


def test_handler_time_is_wall_time_when_no_quota_charges_it() -> None:
    assert exchange({"producer_byte_rate": 1e12}) == [pytest.approx(2.0)]


def test_a_reload_that_adds_request_percentage_switches_the_clock() -> None:
    observer = HandlerTimes()
    core = connected_core({"entities": [{"client_id": "c", "producer_byte_rate": 1e12}]}, observer=observer)
    core.wiring.perf, core.wiring.cpu = ticking(1.0), ticking(0.001)
    manager = core.wiring.charging.quotas
    assert not manager.handler_cpu
    settings = parse_config({"upstream": {"bootstrap_servers": "127.0.0.1:9092"}, "quotas": {
        "algorithm": "sampled", "entities": [{"client_id": "c", "request_percentage": 1e6}]}}).quotas
    manager.update_settings(settings, NOW)
    assert manager.handler_cpu
    core.handle(ev.ClientData(NOW, produce_frame("t", 9, 1, "c", records=2, acks=1)))
    core.handle(ev.UpstreamData(NOW, produce_response(9, 1)))
    assert observer.seconds == [pytest.approx(0.002)]


def test_frames_of_one_read_share_their_clock_reads() -> None:
    # Two requests in one read, their responses in one read: each segment starts where the last one of
    # its event ended, so the CPU clock (a system call) is read three times an event, not four.
    observer = HandlerTimes()
    core = connected_core({"entities": [{"client_id": "c", "request_percentage": 1e6}]}, observer=observer)
    readings: list[float] = []
    core.wiring.perf = ticking(1.0)
    core.wiring.cpu = lambda: readings.append(len(readings) * 0.001) or readings[-1]   # 1 ms a read
    # a first exchange charges the quota: one not yet charged holds a connection to one request at a time
    core.handle(ev.ClientData(NOW, produce_frame("t", 9, 1, "c", records=2, acks=1)))
    core.handle(ev.UpstreamData(NOW, produce_response(9, 1)))
    assert len(readings) == 4   # two an event while one frame is all it reads
    two = produce_frame("t", 9, 2, "c", records=2, acks=1) + produce_frame("t", 9, 3, "c", records=2, acks=1)
    sent = core.handle(ev.ClientData(NOW, two))
    assert [a.side for a in sent if isinstance(a, ev.Send)] == [ev.Side.UPSTREAM] * 2, sent
    assert len(readings) == 4 + 3
    back = core.handle(ev.UpstreamData(NOW, produce_response(9, 2) + produce_response(9, 3)))
    assert [a.side for a in back if isinstance(a, ev.Send)] == [ev.Side.CLIENT] * 2, back
    assert len(readings) == 7 + 3
    # each segment 1 ms, chained or not: 2 ms a request
    assert observer.seconds == [pytest.approx(0.002)] * 3
