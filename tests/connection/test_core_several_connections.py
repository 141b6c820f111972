"""Playbooks of one key's several connections: a throttled connection's next request waits for the line.

A producer keeps one connection per broker, and all of them charge one sensor. KIP-219 mutes only
the connection that sent a request, so without the gate each connection, when its own mute ended,
sent one more request past the line while its siblings' usage still held the key over quota. With
the gate (`Throttling.gate`) that request waits, read but uncharged, until the key's line (the
latest check's `now + throttle`, `quotas.throttle.ThrottleLine`), then goes as the one connection
of a single-broker client would.

Quota arithmetic (Kafka's Rate over windows of 1 s x 11, T = 1000 B/s): a fresh sensor measures over
W = (11 - 1) x 1 s plus the elapsed part of the current window, so with S bytes recorded by t the
throttle is X = (S - T x W) / T = S / 1000 - W and the line t + X. A Produce frame is charged as
Kafka counts it, without its 4-byte size prefix: `s(frame)`.
"""

from __future__ import annotations

import pytest
from helpers.playbook import (
    Recorder,
    connected,
    connected_core,
    connecting,
    fetch_request,
    fetch_response,
    play,
    produce_frame,
    produce_response,
    to_client,
    to_upstream,
)

from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import MuteReason

NOW = 100.0
WINDOWS = {"window_size_seconds": 1, "window_count": 11}
BYTES = {**WINDOWS, "entities": [{"client_id": "c", "producer_byte_rate": 1000}]}
FETCH = {**WINDOWS, "entities": [{"client_id": "c", "consumer_byte_rate": 1000}]}
MUTE, UNMUTE = ev.Mute(MuteReason.THROTTLED), ev.Unmute(MuteReason.THROTTLED)


def s(frame: bytes) -> int:
    return len(frame) - 4


def probed(at: float, x: float) -> list[ev.Action]:
    """After a throttled response at `at` to a client whose version backs off by itself (Produce v9,
    Fetch v11): the back-off probe notes its unread bytes and reads them halfway through the mute
    (backoff.py). A playbook may skip that timer: the one at the mute's end ends it."""
    return [ev.NoteUnread(), ev.SetTimer(pytest.approx(at + x / 2))]


def sibling(core: Connection, now: float) -> Connection:
    """Another connection of the same process (one quota manager), e.g. to another broker."""
    other = Connection(core.parts, "bootstrap", None, "test-client-2")
    play(other, [connecting(now), connected(now)])
    return other


def two_producers(observer: Recorder | None = None) -> tuple[Connection, Connection, float, bytes]:
    """Connection a's throttled Produce, then connection b's, both answered: returns a, b, the key's
    line after b's charge, and a's next request (which a's client sends when its throttle is over)."""
    a = connected_core(BYTES, NOW, observer)
    b = sibling(a, NOW)
    a1, b1, a2 = (produce_frame("t", 9, 1, "c", records=10), produce_frame("t", 9, 1, "c", records=1),
                  produce_frame("t", 9, 2, "c", records=1))
    # a1 at t=100: S = s(a1) = 10 183 B over W = 10 s: X_a = 0.183 s. Held from the read, and muted
    # from the response for X_a (KIP-219).
    x_a = s(a1) / 1000 - 10
    play(a, [(ev.ClientData(NOW, a1), [to_upstream(a1), MUTE, ev.SetTimer(pytest.approx(NOW + x_a))]),
             (ev.UpstreamData(NOW + 0.01, produce_response(9, 1)),
              [to_client(produce_response(9, 1, throttle_ms=183)), *probed(NOW + 0.01, x_a)])])
    # b1 at t=100.02 (b's first request: nothing gates it): S = 10 183 + 1102 over W = 10.02 s:
    # X_b = 11.285 - 10.02 = 1.265 s; the key's line is 100.02 + 1.265 = 101.285, which is a's line
    # plus b1's own cost, 1102 / 1000 s.
    line = NOW + 0.02 + (s(a1) + s(b1)) / 1000 - 10.02
    play(b, [(ev.ClientData(NOW + 0.02, b1), [to_upstream(b1), MUTE, ev.SetTimer(pytest.approx(line))]),
             (ev.UpstreamData(NOW + 0.03, produce_response(9, 1)),
              [to_client(produce_response(9, 1, throttle_ms=1265)), *probed(NOW + 0.03, 1.265)])])
    # a's mute ends at 100.01 + 0.183; its client, told 183 ms, sends a2 then.
    play(a, [(ev.TimerFired(NOW + 0.01 + x_a), [UNMUTE])])
    return a, b, line, a2


def test_a_connections_next_request_waits_while_its_siblings_usage_holds_the_key_over_quota() -> None:
    a, _, line, a2 = two_producers()
    end_of_a = NOW + 0.01 + s(produce_frame("t", 9, 1, "c", records=10)) / 1000 - 10
    # Kafka (and kqp before the gate) would read and forward a2 now, 1.09 s before the key is back
    # within its quota: b1's bytes are not paid for. Gated: a2 waits, uncharged, until the line.
    play(a, [(ev.ClientData(end_of_a, a2), [MUTE, ev.SetTimer(pytest.approx(line))])])
    assert a.throttled and a.parts.charging.quotas.snapshot(end_of_a)[0].rate == pytest.approx(11_285 / 10.193)
    # At the line it goes, past the line as one connection's request does: S = 12 387 B, and at
    # t=101.285 Kafka's window counts one full window and assumes nine more, W = 10.285 s:
    # X = 12.387 - 10.285 = 2.102 s.
    play(a, [(ev.TimerFired(line), [UNMUTE, to_upstream(a2), MUTE, ev.SetTimer(pytest.approx(line + 2.102))])])


def test_the_wait_is_a_mute_under_the_throttles_cause_and_no_new_throttle() -> None:
    recorder = Recorder()
    a, _, line, a2 = two_producers(recorder)
    before = list(recorder.throttles)
    assert a.handle(ev.ClientData(NOW + 0.193, a2)) == [MUTE, ev.SetTimer(pytest.approx(line))]
    assert recorder.mutes[-1] == ("start", "c", "producer_byte_rate") and recorder.throttles == before
    a.handle(ev.TimerFired(line))
    assert recorder.mutes[-2:] == [("end", "c", "producer_byte_rate"), ("start", "c", "producer_byte_rate")]


def test_a_connection_alone_never_waits_for_its_own_line() -> None:
    """Its own throttle mutes it at least until its own line, except that the mute is whole
    milliseconds: one rounded down ends up to 0.5 ms before the line, and must not be held again."""
    core = connected_core(BYTES)
    first, second, third = (produce_frame("t", 9, 1, "c", records=10), produce_frame("t", 9, 2, "c", records=1),
                            produce_frame("t", 9, 3, "c", records=1))
    # first at t=100, answered at once: X = 0.183 s, muted until 100.183.
    play(core, [(ev.ClientData(NOW, first), [to_upstream(first), MUTE, ev.SetTimer(pytest.approx(NOW + 0.183))]),
                (ev.UpstreamData(NOW, produce_response(9, 1)),
                 [to_client(produce_response(9, 1, throttle_ms=183)), *probed(NOW, 0.183)]),
                (ev.TimerFired(NOW + 0.183), [UNMUTE])])
    # second at t=100.1836: S = 11 285 over W = 10.1836: X = 1.1014 s, rounded to 1101 ms: muted until
    # 101.2846, 0.4 ms before its line, 101.285.
    t = NOW + 0.1836
    play(core, [(ev.ClientData(t, second), [to_upstream(second), MUTE, ev.SetTimer(pytest.approx(t + 1.101))]),
                (ev.UpstreamData(t, produce_response(9, 2)),
                 [to_client(produce_response(9, 2, throttle_ms=1101)), *probed(t, 1.101)]),
                (ev.TimerFired(t + 1.101), [UNMUTE])])
    # third when that mute ends: read and forwarded at once, as Kafka's broker would.
    assert core.handle(ev.ClientData(t + 1.101, third))[0] == to_upstream(third)


def test_a_fetch_waits_for_the_line_of_its_siblings_fetches() -> None:
    a = connected_core(FETCH, NOW)
    b = sibling(a, NOW)
    capped = fetch_request(11, 1, "c", max_bytes=10_000)   # consumer_byte_rate x (11 - 1) x 1 s
    big, small = fetch_response(11, 1, records=10), fetch_response(11, 1, records=1)
    # a's response at t=100: R = 10 234 B (its frame less the size prefix) over W = 10 s: X_a = 0.234 s.
    x_a = s(big) / 1000 - 10
    a.handle(ev.ClientData(NOW, fetch_request(11, 1, "c")))
    assert MUTE in a.handle(ev.UpstreamData(NOW, big)) and a.throttling.muted_until == pytest.approx(NOW + x_a)
    # b's at t=100.1: S = 10 234 + 1153 over W = 10.1 s: X_b = 1.287 s; the line is 101.387.
    b.handle(ev.ClientData(NOW + 0.1, fetch_request(11, 1, "c")))
    line = NOW + 0.1 + (s(big) + s(small)) / 1000 - 10.1
    assert MUTE in b.handle(ev.UpstreamData(NOW + 0.1, small)) and b.throttling.muted_until == pytest.approx(line)
    # a's next Fetch when its own mute is over waits for that line, then goes.
    play(a, [(ev.TimerFired(NOW + x_a), [UNMUTE]),
             (ev.ClientData(NOW + x_a, fetch_request(11, 2, "c")), [MUTE, ev.SetTimer(pytest.approx(line))]),
             (ev.TimerFired(line), [UNMUTE, to_upstream(fetch_request(11, 2, "c", max_bytes=10_000)),
                                    ev.Mute(MuteReason.RESPONSE_PENDING)])])
    assert capped == fetch_request(11, 1, "c", max_bytes=10_000)


def test_a_waiting_request_is_dropped_with_the_client_that_gave_up_and_stays_unforwarded_at_shutdown() -> None:
    """Read but not forwarded, it goes as the requests waiting in a muted socket do (giving_up.py): a
    client's EOF drops it (Kafka clients never half-close); at shutdown it stays unforwarded."""
    recorder = Recorder()
    a, _, line, a2 = two_producers(recorder)
    play(a, [(ev.ClientData(NOW + 0.193, a2), [MUTE, ev.SetTimer(pytest.approx(line))]),
             (ev.ClientEof(NOW + 0.2), [ev.Mute(MuteReason.CLOSING), ev.Close("client_closed")])])
    assert recorder.dropped == [1]
    b, _, line, b2 = two_producers()
    play(b, [(ev.ClientData(NOW + 0.193, b2), [MUTE, ev.SetTimer(pytest.approx(line))]),
             (ev.ShutdownBegun(NOW + 0.2), [ev.Mute(MuteReason.CLOSING), ev.Close("shutdown")])])


def test_a_request_under_another_client_id_is_not_held_for_this_ones_line() -> None:
    a, _, _, _ = two_producers()
    other = produce_frame("t", 9, 2, "d", records=1)
    assert a.handle(ev.ClientData(NOW + 0.193, other)) == [to_upstream(other)]
