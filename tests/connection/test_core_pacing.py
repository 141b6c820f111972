"""Playbooks of pacing and of clients that do not back off (issue 20), and of a client that gives up.

Quota arithmetic (Kafka's Rate over windows of 1 s x 11, producer_byte_rate T = 1000 B/s): a sensor
first charged at NOW measures, at NOW + e, over W = e + (10 - floor(e)) s while fewer than 10 windows
are full (Rate.windowSize), so a total of U bytes throttles for X = U / 1000 - W seconds. A Produce
counts its frame less the 4-byte size prefix: a 12-record frame here is S1 = 12 207 B (v3) or 12 201 B
(v9), a 1-record one S2 = 1108 B (v3) or 1102 B (v9).

The first request alone: X1 = S1 / 1000 - 10 = ~2.2 s, shorter than its own cost S1 / 1000 = ~12.2 s,
so it is muted X1 paced or not. The second, read when that mute ends (~2.2 s later): X2 = (S1 + S2) /
1000 - W = ~3.1 s, while its own cost is S2 / 1000 = ~1.1 s. Paced, a client that does not back off is
muted (and told) ~1.1 s; a client that backs off, or `quotas.pacing: off`, gets the broker's ~3.1 s.
"""

from __future__ import annotations

import math

import pytest
from helpers import playbook as pb
from helpers.playbook import Recorder, connected_core, play, to_client, to_upstream

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.backoff import HONOURS, IGNORES, UNKNOWN
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import MuteReason

NOW = 100.0
LATENCY = 0.01
BYTES = {"window_size_seconds": 1, "window_count": 11, "entities": [{"client_id": "c", "producer_byte_rate": 1000}]}


def window(elapsed: float) -> float:
    """Kafka's Rate.windowSize for a sensor first charged `elapsed` s ago (1 s x 11 windows)."""
    return elapsed + max(0, 10 - math.floor(elapsed))


def size(frame: bytes) -> int:
    return len(frame) - 4


def first_throttle(core: Connection, version: int, frames: bytes, first: bytes, probe: bool) -> float:
    """Play the first request (held over quota, its response at NOW + LATENCY); the time its mute ends."""
    x1 = size(first) / 1000 - 10
    timer = [ev.NoteUnread(), ev.SetTimer(pytest.approx(NOW + LATENCY + x1 / 2))] if probe else \
        [ev.SetTimer(pytest.approx(NOW + LATENCY + x1))]
    play(core, [
        (ev.ClientData(NOW, frames), [to_upstream(first), ev.Mute(MuteReason.THROTTLED),
                                      ev.SetTimer(pytest.approx(NOW + x1))]),
        (ev.UpstreamData(NOW + LATENCY, pb.produce_response(version, 1)),
         [to_client(pb.produce_response(version, 1, throttle_ms=round(x1 * 1000))), *timer]),
    ])
    return NOW + LATENCY + x1


def second_throttle(core: Connection, end: float, second: bytes, unread: int | None = None) -> float:
    """The first mute ends at `end`: the second request goes, over quota; the seconds it is muted."""
    actions = core.handle(ev.TimerFired(end, unread))
    assert actions[:3] == [ev.Unmute(MuteReason.THROTTLED), to_upstream(second), ev.Mute(MuteReason.THROTTLED)]
    return actions[3].at - end


@pytest.mark.parametrize(("pacing", "version", "paced"), [(True, 3, True), (False, 3, False), (True, 9, False)])
def test_a_client_that_cannot_back_off_is_muted_for_its_requests_cost(pacing: bool, version: int,
                                                                         paced: bool) -> None:
    """Produce v3 has no client-side throttling (KIP-219: v6+): paced, its second request is muted
    its own cost S2 / 1000 and told so. Unpaced, or at v9 (which backs off by itself), it gets the
    broker's X2; the usage recorded is the same either way."""
    recorder = Recorder()
    core = connected_core(BYTES, observer=recorder, pacing=pacing)
    first = pb.produce_frame("t", version, 1, "c", records=12)
    second = pb.produce_frame("t", version, 2, "c", records=1)
    end = first_throttle(core, version, first + second, first, probe=version >= 6)
    muted = second_throttle(core, end, second)
    x2 = (size(first) + size(second)) / 1000 - window(end - NOW)
    expected = size(second) / 1000 if paced else x2
    assert muted == pytest.approx(expected) and x2 > 3 * muted / 2 if paced else muted == pytest.approx(x2)
    [delivered] = core.handle(ev.UpstreamData(end + LATENCY, pb.produce_response(version, 2)))[:1]
    assert pb.throttle_of(b"".join(delivered.parts), ApiKey.Produce, version) == round(expected * 1000), \
        "throttle_time_ms says the mute the connection gets"
    if version < 6:
        assert recorder.ignored == [("unknown", f"Produce v{version}", "version")] * 2
        assert core.throttling.backoff.verdict == IGNORES
    [state] = core.parts.charging.quotas.snapshot(end + LATENCY)
    assert state.rate * window(end + LATENCY - NOW) == pytest.approx(size(first) + size(second)), \
        "the full usage is recorded, paced or not"


def test_a_newer_client_seen_sending_while_throttled_is_paced_from_then_on() -> None:
    """Produce v9 backs off by itself, so kqp probes: halfway through the mute the edge says S2 bytes
    arrived since the throttled response went out (a Sarama-like client ignoring throttle_time_ms).
    It is seen not to back off: its next throttle is paced, and counted under its software."""
    recorder = Recorder()
    core = connected_core(BYTES, observer=recorder, pacing=True)
    first = pb.produce_frame("t", 9, 1, "c", records=12)
    second = pb.produce_frame("t", 9, 2, "c", records=1)
    core.handle(ev.ClientData(NOW, encode_request(ApiKey.ApiVersions, 3, 7, "c", client_software_name="sarama",
                                                  client_software_version="1.22.0")))
    end = first_throttle(core, 9, first, first, probe=True)
    assert core.throttling.backoff.verdict == UNKNOWN
    play(core, [(ev.TimerFired((NOW + LATENCY + end) / 2, len(second)), [ev.SetTimer(pytest.approx(end))]),
                (ev.ClientData(end - 0.1, second), [])])   # (what the socket held, read once unmuted)
    assert core.throttling.backoff.verdict == IGNORES
    assert recorder.ignored == [("sarama", "1.22.0", "observed")]
    muted = second_throttle(core, end, second)
    assert muted == pytest.approx(size(second) / 1000), "paced: its own cost, not the broker's X2"
    core.handle(ev.UpstreamData(end + LATENCY, pb.produce_response(9, 2)))
    assert recorder.ignored == [("sarama", "1.22.0", "observed")] * 2


def test_a_client_that_waits_out_its_throttle_honours_it_and_a_late_probe_says_nothing() -> None:
    core = connected_core(BYTES, pacing=True)
    first = pb.produce_frame("t", 9, 1, "c", records=12)
    end = first_throttle(core, 9, first, first, probe=True)
    play(core, [(ev.TimerFired((NOW + LATENCY + end) / 2, 0), [ev.SetTimer(pytest.approx(end))])])
    assert core.throttling.backoff.verdict == HONOURS
    # Another connection whose probe only fires after its mute ended learns nothing from it: a client
    # that waited exactly its throttle may be sending again by then.
    late = connected_core(BYTES, pacing=True)
    end = first_throttle(late, 9, first, first, probe=True)
    play(late, [(ev.TimerFired(end + 0.001, 5000), [ev.Unmute(MuteReason.THROTTLED)])])
    assert late.throttling.backoff.verdict == UNKNOWN


def test_acks_0_and_old_fetches_are_paced_too() -> None:
    """An acks=0 Produce has no response to carry a throttle, and Fetch v7 no client-side throttling
    (v8+): both are paced. Fetch: consumer_byte_rate 1000 B/s, a response of R bytes costs R / 1000 s
    (R: the frame less its size prefix, FetchResponse.sizeOf)."""
    core = connected_core(BYTES, pacing=True)
    first = pb.produce_frame("t", 7, 1, "c", records=12, acks=0)
    second = pb.produce_frame("t", 7, 2, "c", records=1, acks=0)
    x1 = size(first) / 1000 - 10
    play(core, [(ev.ClientData(NOW, first + second),
                 [to_upstream(first), ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + x1))])])
    assert second_throttle(core, NOW + x1, second) == pytest.approx(size(second) / 1000)

    fetch = connected_core({"window_size_seconds": 1, "window_count": 11,
                            "entities": [{"client_id": "c", "consumer_byte_rate": 1000}]}, pacing=True)
    big, small = pb.fetch_response(7, 1, records=12), pb.fetch_response(7, 2, records=1)
    fetch.handle(ev.ClientData(NOW, pb.fetch_request(7, 1, "c") + pb.fetch_request(7, 2, "c")))
    actions = fetch.handle(ev.UpstreamData(NOW, big))
    x1 = size(big) / 1000 - 10   # alone: shorter than its cost
    assert actions[2] == ev.SetTimer(pytest.approx(NOW + x1))
    actions = fetch.handle(ev.TimerFired(NOW + x1))
    assert actions[1] == to_upstream(pb.fetch_request(7, 2, "c", max_bytes=10_000))
    actions = fetch.handle(ev.UpstreamData(NOW + x1, small))
    assert pb.throttle_of(b"".join(actions[0].parts), ApiKey.Fetch, 7) == round(size(small))   # ms = R / 1000 s


def test_a_client_that_closes_while_throttled_has_what_it_left_dropped() -> None:
    """Issue 20, a client that gives up: its requests pipelined behind the mute were read but never
    forwarded. EOF: they are dropped (counted, logged) and the connection closes once nothing is
    owed; nothing more reaches the upstream."""
    recorder = Recorder()
    core = connected_core(BYTES, observer=recorder)
    first = pb.produce_frame("t", 3, 1, "c", records=12)
    rest = pb.produce_frame("t", 3, 2, "c", records=1) + pb.produce_frame("t", 3, 3, "c", records=1)
    first_throttle(core, 3, first + rest, first, probe=False)
    play(core, [(ev.ClientEof(NOW + 1), [ev.Mute(MuteReason.CLOSING), ev.Close("client_closed")])])
    assert recorder.dropped == [2]


def test_a_close_seen_on_the_muted_socket_drops_what_is_left_before_anything_more_is_read() -> None:
    """The client closed while muted: kqp does not read the socket, so the edge tells the core at the
    timer (`TimerFired.client_gone`, socket_probe.py). The request still owed a response gets it;
    the one read but not forwarded is dropped; nothing more is read."""
    recorder = Recorder()
    core = connected_core(BYTES, observer=recorder)
    first = pb.produce_frame("t", 3, 1, "c", records=12)
    second = pb.produce_frame("t", 3, 2, "c", records=1)
    x1 = size(first) / 1000 - 10
    core.handle(ev.ClientData(NOW, first + second))
    play(core, [
        (ev.TimerFired(NOW + x1 / 2, None, True), [ev.Mute(MuteReason.CLOSING), ev.SetTimer(pytest.approx(NOW + x1))]),
        (ev.UpstreamData(NOW + 1, pb.produce_response(3, 1)),
         [to_client(pb.produce_response(3, 1, throttle_ms=round(x1 * 1000))),
          ev.SetTimer(pytest.approx(NOW + 1 + x1)), ev.Close("client_closed")]),
    ])
    assert recorder.dropped == [1]


def test_a_reset_drops_what_was_read_and_not_forwarded() -> None:
    recorder = Recorder()
    core = connected_core(BYTES, observer=recorder)
    first = pb.produce_frame("t", 3, 1, "c", records=12)
    core.handle(ev.ClientData(NOW, first + pb.produce_frame("t", 3, 2, "c", records=1)))
    play(core, [(ev.ClientLost(NOW + 1), [ev.Close("client_closed")])])
    assert recorder.dropped == [1]
