"""A connection's life: its phases move only as the table in `phases.py` says, and the core itself
decides when it ends (drained after EOF or shutdown, idle past connections_max_idle_ms).

Playbooks as elsewhere (helpers.playbook); the idle arithmetic is the loop time each event carries,
compared with the last whole request read or response sent.
"""

from __future__ import annotations

import dataclasses

import pytest
from helpers.playbook import (
    Recorder,
    connected_core,
    connecting,
    make_core,
    play,
    produce_frame,
    produce_response,
    to_client,
    to_upstream,
)

from kqp.proxy.connection import events as ev
from kqp.proxy.connection.events import MuteReason
from kqp.proxy.connection.phases import IllegalTransition, Move, Phase, next_phase

NOW = 100.0
IDLE_MS = 2000


def test_a_connection_lives_through_its_phases_in_order() -> None:
    core = make_core()
    assert core.phase is Phase.CONNECTING
    core.handle(ev.ClientConnected(NOW))
    core.handle(ev.UpstreamConnected(NOW))
    assert core.phase is Phase.OPEN
    request = produce_frame("t", 9, 1, "c")
    play(core, [(ev.ClientData(NOW, request), [to_upstream(request)]), (ev.ClientEof(NOW), [])])
    assert core.phase is Phase.DRAINING
    play(core, [(ev.UpstreamData(NOW, produce_response(9, 1)),
                 [to_client(produce_response(9, 1)), ev.Close("client_closed")])])
    assert core.phase is Phase.CLOSED and core.closed


def test_a_client_that_closes_before_the_upstream_is_up_has_nothing_forwarded() -> None:
    """Issue 20 (giving_up.py): Kafka clients never half-close, so an EOF is a client that is gone,
    and what it sent but kqp had not forwarded yet is dropped, as a broker drops a closed channel's
    unread requests (this test said the opposite before: the request went once the upstream was up)."""
    recorder = Recorder()
    core = make_core(observer=recorder)
    request = produce_frame("t", 9, 1, "c")
    play(core, [
        connecting(NOW),
        (ev.ClientData(NOW, request), []),
        (ev.ClientEof(NOW), [ev.Mute(MuteReason.CLOSING), ev.Close("client_closed")]),
        (ev.UpstreamConnected(NOW), []),
    ])
    assert recorder.dropped == [1]


TRUNCATED_14 = "truncated frame: the client closed the connection mid-frame (14 bytes of it received)"


def test_a_frame_left_unfinished_before_the_upstream_is_up_is_a_truncated_frame() -> None:
    """A client that closes mid-frame while kqp still connects upstream left no request to drop: its
    close is the truncated frame it is when kqp reads it at once (`protocol_error`, as README's
    hostile input says), whatever the upstream's speed; only whole requests make a client that gave up."""
    recorder = Recorder()
    core = make_core(observer=recorder)
    request = produce_frame("t", 9, 1, "c")
    play(core, [
        connecting(NOW),
        (ev.ClientData(NOW, request[:14]), []),
        (ev.ClientEof(NOW), [ev.Mute(MuteReason.CLOSING), ev.Close("protocol_error", TRUNCATED_14)]),
        (ev.UpstreamConnected(NOW), []),
    ])
    assert recorder.dropped == []


def test_shutdown_before_the_upstream_is_up_closes_at_once() -> None:
    core = make_core()
    core.handle(ev.ClientConnected(NOW))
    play(core, [(ev.ShutdownBegun(NOW), [ev.Mute(MuteReason.CLOSING), ev.Close("shutdown")]),
                (ev.UpstreamConnected(NOW), [])])


def test_an_illegal_move_is_kqps_bug_and_closes_only_that_connection() -> None:
    recorder = Recorder()
    core = connected_core(observer=recorder)
    play(core, [(ev.UpstreamConnected(NOW), [ev.Close("internal_error")])])   # up twice: our bug
    assert recorder.closed == ["internal_error"]


def test_the_table_allows_exactly_the_drawn_moves() -> None:
    assert next_phase(Phase.CONNECTING, Move.UPSTREAM_UP) is Phase.OPEN
    assert next_phase(Phase.OPEN, Move.CLIENT_EOF) is Phase.DRAINING
    assert next_phase(Phase.OPEN, Move.SHUTDOWN) is Phase.DRAINING
    assert next_phase(Phase.DRAINING, Move.SHUTDOWN) is Phase.DRAINING
    assert next_phase(Phase.CONNECTING, Move.LOGIN_STARTED) is Phase.LOGGING_IN
    assert next_phase(Phase.LOGGING_IN, Move.LOGGED_IN) is Phase.OPEN
    # A client that half-closed while kqp was logging in still has what it sent forwarded once it is.
    assert next_phase(Phase.DRAINING, Move.LOGGED_IN) is Phase.DRAINING
    assert all(next_phase(phase, Move.CLOSE) is Phase.CLOSED for phase in Phase if phase is not Phase.CLOSED)
    for phase, move in [(Phase.OPEN, Move.UPSTREAM_UP), (Phase.CLOSED, Move.CLOSE), (Phase.CLOSED, Move.CLIENT_EOF),
                        (Phase.OPEN, Move.LOGGED_IN), (Phase.OPEN, Move.LOGIN_STARTED),
                        (Phase.LOGGING_IN, Move.UPSTREAM_UP), (Phase.CONNECTING, Move.LOGGED_IN)]:
        with pytest.raises(IllegalTransition):
            next_phase(phase, move)


def test_idle_past_the_limit_closes_with_the_limit_in_the_message() -> None:
    core = connected_core(now=NOW, connections_max_idle_ms=IDLE_MS)
    play(core, [
        (ev.IdleCheck(NOW + 2.0), []),                       # 2000 ms idle: not more than the limit
        (ev.IdleCheck(NOW + 2.001), [ev.Close("idle", f"idle for more than {IDLE_MS} ms")]),
    ])


def test_idle_is_counted_from_the_last_request_or_response() -> None:
    core = connected_core(now=NOW, connections_max_idle_ms=IDLE_MS)
    request = produce_frame("t", 9, 1, "c")
    play(core, [
        (ev.ClientData(NOW + 1.5, request), [to_upstream(request)]),
        (ev.IdleCheck(NOW + 3.0), []),                       # 1.5 s since the request
        (ev.UpstreamData(NOW + 3.4, produce_response(9, 1)), [to_client(produce_response(9, 1))]),
        (ev.IdleCheck(NOW + 5.3), []),                       # 1.9 s since the response
        (ev.IdleCheck(NOW + 5.5), [ev.Close("idle", f"idle for more than {IDLE_MS} ms")]),
    ])


def test_a_throttled_connection_is_still_closed_when_idle() -> None:
    """Kafka: connections.max.idle.ms applies while muted. producer_byte_rate 1000 B/s over 1 s x
    11 windows: a ~30 KB request throttles ~20 s, far beyond the 2 s idle limit."""
    core = connected_core({"entities": [{"client_id": "c", "producer_byte_rate": 1000}]}, now=NOW,
                          connections_max_idle_ms=IDLE_MS, observer=(recorder := Recorder()))
    core.handle(ev.ClientData(NOW, produce_frame("t", 9, 1, "c", acks=0)))
    assert core.throttled
    play(core, [(ev.IdleCheck(NOW + 2.5), [ev.Close("idle", f"idle for more than {IDLE_MS} ms")])])
    assert recorder.mutes == [("start", "c", "producer_byte_rate"), ("end", "c", "producer_byte_rate")]


def test_a_reload_changes_the_idle_limit_of_open_connections() -> None:
    core = connected_core(now=NOW, connections_max_idle_ms=IDLE_MS)
    core.wiring.settings = dataclasses.replace(core.wiring.settings, connections_max_idle_ms=10_000)
    play(core, [(ev.IdleCheck(NOW + 5.0), []), (ev.IdleCheck(NOW + 10.5), [ev.Close("idle", "idle for more than "
                                                                                          "10000 ms")])])
