"""Playbooks of a `steady` quota (the config file's default) in the connection core.

Arithmetic: producer_byte_rate T = 10000 B/s over 1 s x 11 windows, so the bucket holds Kafka's
first allowance, 10 x 1 s x T = 100000 B. Three 30-record frames (~30.1 KB each, S counted without
the size prefix) fit; the fourth leaves K = 100000 - (S1 + S2 + S3 + S4) < 0, a throttle
X = -K / T of about 2 s. All of it but one window is served before the request is forwarded (the
upstream never gets more than one window's worth beyond the quota's line), and the response tells
what is left of X when it comes: the mute ends at the line, however long the upstream took.
"""

from __future__ import annotations

import pytest
from helpers.playbook import Recorder, connected_core, play, produce_frame, produce_response, to_client, to_upstream

from kqp.proxy.connection import events as ev
from kqp.proxy.connection.events import MuteReason, Side

NOW = 100.0
T = 10_000
STEADY = {"algorithm": "steady", "window_size_seconds": 1, "window_count": 11,
          "entities": [{"client_id": "c", "producer_byte_rate": T}]}
VERSION = 5   # a client that cannot back off: no back-off probe in the actions


def frames(*correlation_ids: int, acks: int = -1) -> list[bytes]:
    return [produce_frame("t", VERSION, i, "c", acks=acks) for i in correlation_ids]


def debt(sent: list[bytes]) -> float:
    """-K / T after `sent` were charged at once: what the bucket owes, in seconds."""
    return (sum(len(f) - 4 for f in sent) - 10 * T) / T


def test_a_request_over_the_line_by_more_than_a_window_waits_before_it_goes_then_is_told_the_rest() -> None:
    recorder = Recorder()
    core = connected_core(STEADY, observer=recorder)
    f = frames(1, 2, 3, 4, 5)
    x = debt(f[:4])
    assert 1.0 < x < 20.0, "the fourth frame owes more than a window, less than the hold's cap"
    play(core, [
        # Three fit the allowance and go; the fourth is charged and held: muted until its line,
        # sent one window before it. The fifth stays unread in the muted connection.
        (ev.ClientData(NOW, b"".join(f)),
         [to_upstream(f[0]), to_upstream(f[1]), to_upstream(f[2]), ev.Mute(MuteReason.THROTTLED),
          ev.SetTimer(pytest.approx(NOW + x - 1.0))]),
        (ev.UpstreamData(NOW + 0.01, b"".join(produce_response(VERSION, i) for i in (1, 2, 3))),
         [to_client(produce_response(VERSION, i)) for i in (1, 2, 3)]),
        (ev.TimerFired(NOW + x - 1.0), [to_upstream(f[3]), ev.SetTimer(pytest.approx(NOW + x, abs=0.0006))]),
    ])
    assert core.muted(Side.CLIENT) and recorder.throttles == []
    # Answered 10 ms later: told what is left of X, the mute still ending at the line.
    told = round((1.0 - 0.01) * 1000)
    actions = core.handle(ev.UpstreamData(NOW + x - 0.99, produce_response(VERSION, 4)))
    assert actions[0] == to_client(produce_response(VERSION, 4, throttle_ms=told))
    assert core.throttling.muted_until == pytest.approx(NOW + x, abs=0.0006)
    assert recorder.throttles == [("c", "producer_byte_rate", told / 1000)]
    # At the line the fifth is read: the bucket is at 0, so it owes its own cost, ~3 s, and waits 2 s of it.
    line = core.throttling.muted_until
    actions = core.handle(ev.TimerFired(line))
    cost = (len(f[4]) - 4) / T
    assert actions == [ev.Unmute(MuteReason.THROTTLED), ev.Mute(MuteReason.THROTTLED),
                       ev.SetTimer(pytest.approx(line + cost - 1.0, abs=0.001))]


def test_a_held_acks_0_request_goes_when_its_time_comes_and_mutes_to_the_line() -> None:
    core = connected_core(STEADY)
    f = frames(1, 2, 3, 4, acks=0)
    x = debt(f)
    play(core, [
        (ev.ClientData(NOW, b"".join(f)),
         [to_upstream(f[0]), to_upstream(f[1]), to_upstream(f[2]), ev.Mute(MuteReason.THROTTLED),
          ev.SetTimer(pytest.approx(NOW + x - 1.0))]),
        (ev.TimerFired(NOW + x - 1.0), [to_upstream(f[3]), ev.SetTimer(pytest.approx(NOW + x, abs=0.0006))]),
    ])
    play(core, [(ev.TimerFired(core.throttling.muted_until), [ev.Unmute(MuteReason.THROTTLED)])])


def test_a_client_that_gives_up_on_a_held_request_has_it_dropped_never_forwarded() -> None:
    """EOF while a charged request waits to be forwarded: it is dropped with what the client left
    (as a broker drops a closed channel's unread requests), and the connection closes once the
    responses it is owed have gone."""
    recorder = Recorder()
    core = connected_core(STEADY, observer=recorder)
    f = frames(1, 2, 3, 4, 5)
    core.handle(ev.ClientData(NOW, b"".join(f)))
    play(core, [
        (ev.ClientEof(NOW + 0.5), [ev.Mute(MuteReason.CLOSING)]),
        (ev.TimerFired(NOW + debt(f[:4]) - 1.0), [ev.SetTimer(pytest.approx(NOW + debt(f[:4]), abs=0.0006))]),
        (ev.UpstreamData(NOW + 0.6, b"".join(produce_response(VERSION, i) for i in (1, 2, 3))),
         [*(to_client(produce_response(VERSION, i)) for i in (1, 2, 3)), ev.Close("client_closed")]),
    ])
    assert recorder.dropped == [2]
