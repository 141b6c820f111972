"""Playbooks of a `steady` quota (the config file's default) in the connection core: KIP-219 as written.

Arithmetic: producer_byte_rate T = 10000 B/s over 1 s x 11 windows, so the bucket holds Kafka's
first allowance, 10 x 1 s x T = 100000 B. Three 30-record frames (~30.1 KB each, S counted without
the size prefix) fit; the fourth leaves K = 100000 - (S1 + S2 + S3 + S4) < 0, a throttle
X = -K / T of about 2 s, the key's whole debt. The fourth goes upstream as it is read, like the
three before it; its response, whenever it comes, tells X, and the connection is muted from the read
until X has passed. Nothing is held back and nothing is told short.
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


def test_the_request_over_the_line_goes_at_once_and_its_response_tells_the_whole_debt() -> None:
    recorder = Recorder()
    core = connected_core(STEADY, observer=recorder)
    f = frames(1, 2, 3, 4, 5)
    x = debt(f[:4])
    assert 1.0 < x < 5.0, "the fourth frame owes more than a window"
    ms = round(x * 1000)
    play(core, [
        # Three fit the allowance; the fourth crosses the line and goes too, decided now: muted until
        # its throttle ends. The fifth stays unread in the muted connection.
        (ev.ClientData(NOW, b"".join(f)),
         [to_upstream(f[0]), to_upstream(f[1]), to_upstream(f[2]), to_upstream(f[3]), ev.Mute(MuteReason.THROTTLED),
          ev.SetTimer(pytest.approx(NOW + ms / 1000))]),
        # The responses come back at once, the fourth's telling the whole throttle.
        (ev.UpstreamData(NOW + 0.01, b"".join(produce_response(VERSION, i) for i in (1, 2, 3, 4))),
         [*(to_client(produce_response(VERSION, i)) for i in (1, 2, 3)),
          to_client(produce_response(VERSION, 4, throttle_ms=ms))]),
    ])
    # Told and imposed agree: the throttle counted is the mute's length, from the read to its end.
    assert recorder.throttles == [("c", "producer_byte_rate", ms / 1000)]
    assert core.throttling.muted_until == pytest.approx(NOW + ms / 1000) and core.muted(Side.CLIENT)
    # At the line the fifth is read: the bucket is at 0, so it owes its own cost, ~3 s, all of it told.
    line = core.throttling.muted_until
    actions = core.handle(ev.TimerFired(line))
    cost = round((len(f[4]) - 4) / T * 1000) / 1000
    assert actions == [ev.Unmute(MuteReason.THROTTLED), to_upstream(f[4]), ev.Mute(MuteReason.THROTTLED),
                       ev.SetTimer(pytest.approx(line + cost, abs=0.001))]


def test_a_slow_upstream_still_hears_the_whole_throttle_and_the_mute_ends_at_the_line() -> None:
    """The response comes 1.5 s after the read: the client is told the whole X (it comes back no
    sooner than the mute ends), and the mute still ends X after the read: the debt is repaid then."""
    core = connected_core(STEADY)
    f = frames(1, 2, 3, 4)
    ms = round(debt(f) * 1000)
    core.handle(ev.ClientData(NOW, b"".join(f)))
    actions = core.handle(ev.UpstreamData(NOW + 1.5, b"".join(produce_response(VERSION, i) for i in (1, 2, 3, 4))))
    assert actions[-1] == to_client(produce_response(VERSION, 4, throttle_ms=ms))
    assert core.throttling.muted_until == pytest.approx(NOW + ms / 1000)


def test_an_acks_0_request_over_the_line_goes_at_once_and_mutes_to_the_line() -> None:
    recorder = Recorder()
    core = connected_core(STEADY, observer=recorder)
    f = frames(1, 2, 3, 4, acks=0)
    ms = round(debt(f) * 1000)
    play(core, [
        (ev.ClientData(NOW, b"".join(f)),
         [*(to_upstream(frame) for frame in f), ev.Mute(MuteReason.THROTTLED),
          ev.SetTimer(pytest.approx(NOW + ms / 1000))]),
    ])
    assert recorder.throttles == [("c", "producer_byte_rate", ms / 1000)], "no response: counted as decided"
    play(core, [(ev.TimerFired(core.throttling.muted_until), [ev.Unmute(MuteReason.THROTTLED)])])


def test_a_client_that_gives_up_while_muted_has_what_it_left_unread_dropped() -> None:
    """EOF while muted: what the client sent after the request that crossed the line was never read,
    so it is dropped (as a broker drops a closed channel's unread requests), and the connection
    closes once the responses it is owed have gone."""
    recorder = Recorder()
    core = connected_core(STEADY, observer=recorder)
    f = frames(1, 2, 3, 4, 5)
    core.handle(ev.ClientData(NOW, b"".join(f)))
    play(core, [
        (ev.ClientEof(NOW + 0.5), [ev.Mute(MuteReason.CLOSING)]),
        (ev.UpstreamData(NOW + 0.6, b"".join(produce_response(VERSION, i) for i in (1, 2, 3))),
         [*(to_client(produce_response(VERSION, i)) for i in (1, 2, 3))]),
        (ev.UpstreamData(NOW + 0.7, produce_response(VERSION, 4)),
         [to_client(produce_response(VERSION, 4, throttle_ms=round(debt(f[:4]) * 1000))), ev.Close("client_closed")]),
    ])
    assert recorder.dropped == [1]
