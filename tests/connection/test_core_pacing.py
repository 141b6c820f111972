"""Playbooks of pacing and of clients that do not back off (issue 20), and of a client that gives up.

Quota arithmetic (Kafka's Rate over windows of 1 s x 11): a sensor first charged at NOW measures, at
NOW + e, over W = e + (10 - floor(e)) s while fewer than 10 windows are full (Rate.windowSize), so a
total of U bytes throttles for X = U / T - W seconds. A Produce counts its frame less its 4-byte size
prefix (S). Each scene has three requests:

* A, 12 records (S_A = 12 207 B at v3, 12 201 B at v9), is Kafka's allowance for a fresh sensor: the
  quota is T = S_A / 10 B/s, so A reads as exactly T (no throttle);
* B, 3 records, crosses it: X_B = S_B / T = ~2.5 s, which is also its own cost: muted ~2.5 s either way;
* C, 1 record, read when that mute ends: X_C = (S_A + S_B + S_C) / T - W = ~3 s, while its own cost
  is S_C / T = ~0.9 s. Paced, a client that does not back off is muted (and told) ~0.9 s; a client
  that backs off, or `quotas.pacing: off`, gets the broker's ~3 s.
"""

from __future__ import annotations

import math
from typing import Any

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


def approx(seconds: float) -> object:
    """A time as the core keeps it: throttles are whole milliseconds."""
    return pytest.approx(seconds, abs=1e-3)


def window(elapsed: float) -> float:
    """Kafka's Rate.windowSize for a sensor first charged `elapsed` s ago (1 s x 11 windows)."""
    return elapsed + max(0, 10 - math.floor(elapsed))


def size(frame: bytes) -> int:
    return len(frame) - 4


class Scene:
    """Requests A, B and C of one Produce version, and the quota that makes A the allowance."""

    def __init__(self, version: int, acks: int = 1) -> None:
        self.version = version
        self.a, self.b, self.c = (pb.produce_frame("t", version, i, "c", records=n, acks=acks)
                                  for i, n in ((1, 12), (2, 3), (3, 1)))
        self.quota = size(self.a) / 10

    def config(self, key: str = "producer_byte_rate") -> dict[str, Any]:
        return {"window_size_seconds": 1, "window_count": 11, "entities": [{"client_id": "c", key: self.quota}]}

    def cost(self, frame: bytes) -> float:
        return size(frame) / self.quota


B_AT = NOW + LATENCY + 0.15   # B's response: after A's by more than the back-off probe's grace


def crossing(core: Connection, scene: Scene, probe: bool, frames: bytes | None = None) -> float:
    """A goes, B crosses the quota and goes too, muted from its read for its throttle; A's response
    comes back at NOW + LATENCY, B's at B_AT, telling that throttle; the time B's mute ends."""
    x_b = scene.cost(scene.b)
    # A client that can back off is probed (backoff.py): its unread bytes noted as the throttled
    # response goes, and looked at again halfway through what is left of the mute.
    timer = [ev.NoteUnread(), ev.SetTimer(approx(B_AT + (NOW + x_b - B_AT) / 2))] if probe else []
    v = scene.version
    play(core, [
        (ev.ClientData(NOW, frames or scene.a + scene.b),
         [to_upstream(scene.a), to_upstream(scene.b), ev.Mute(MuteReason.THROTTLED),
          ev.SetTimer(approx(NOW + x_b))]),
        (ev.UpstreamData(NOW + LATENCY, pb.produce_response(v, 1)), [to_client(pb.produce_response(v, 1))]),
        (ev.UpstreamData(B_AT, pb.produce_response(v, 2)),
         [to_client(pb.produce_response(v, 2, throttle_ms=round(x_b * 1000))), *timer]),
    ])
    return core.throttling.muted_until   # NOW + X_B, in whole milliseconds


def next_throttle(core: Connection, end: float, frame: bytes, unread: int | None = None) -> float:
    """The mute ends at `end`: `frame` goes, over quota; the seconds it is muted."""
    actions = core.handle(ev.TimerFired(end, unread))
    assert actions[:3] == [ev.Unmute(MuteReason.THROTTLED), to_upstream(frame), ev.Mute(MuteReason.THROTTLED)]
    return actions[3].at - end


@pytest.mark.parametrize(("pacing", "version", "paced"), [(True, 3, True), (False, 3, False), (True, 9, False)])
def test_a_client_that_cannot_back_off_is_muted_for_its_requests_cost(pacing: bool, version: int,
                                                                         paced: bool) -> None:
    """Produce v3 has no client-side throttling (KIP-219: v6+): paced, C is muted its own cost
    S_C / T and told so. Unpaced, or at v9 (which backs off by itself), it gets the broker's X_C; the
    usage recorded is the same either way."""
    recorder = Recorder()
    scene = Scene(version)
    core = connected_core(scene.config(), observer=recorder, pacing=pacing)
    end = crossing(core, scene, probe=version >= 6, frames=scene.a + scene.b + scene.c)
    muted = next_throttle(core, end, scene.c)
    x_c = (size(scene.a) + size(scene.b) + size(scene.c)) / scene.quota - window(end - NOW)
    expected = scene.cost(scene.c) if paced else x_c
    assert muted == approx(expected) and (not paced or x_c > 3 * muted)
    [delivered] = core.handle(ev.UpstreamData(end + LATENCY, pb.produce_response(version, 3)))[:1]
    assert pb.throttle_of(b"".join(delivered.parts), ApiKey.Produce, version) == round(expected * 1000), \
        "throttle_time_ms says the mute the connection gets"
    if version < 6:
        assert recorder.ignored == [("unknown", f"Produce v{version}", "version")] * 2
        assert core.throttling.backoff.verdict == IGNORES
    [state] = core.wiring.charging.quotas.snapshot(end + LATENCY)
    assert state.rate * window(end + LATENCY - NOW) == approx(size(scene.a) + size(scene.b) + size(scene.c)), \
        "the full usage is recorded, paced or not"


def probe(core: Connection, start: float, end: float, arrived: int) -> None:
    """Serve the back-off probe of a mute from `start` to `end`: `arrived` bytes by half the mute."""
    play(core, [(ev.TimerFired((start + end) / 2, arrived), [ev.SetTimer(approx(end))])])


def test_a_newer_client_seen_sending_while_throttled_is_counted_not_paced() -> None:
    """Produce v9 backs off by itself, so kqp probes: in B's mute, and again in C's, the edge says
    bytes arrived since the throttled response went out (a Sarama-like client refilling the slot
    it freed, whatever throttle_time_ms says). Two probes in a row: it does not back off, and D's
    throttle is counted under its software. It keeps the broker's throttle: a pace would not pay back
    the sampled rate's echoes (throttling.py `_paced`)."""
    recorder = Recorder()
    scene = Scene(9)
    d = pb.produce_frame("t", 9, 4, "c", records=1)
    core = connected_core(scene.config(), observer=recorder, pacing=True)
    core.handle(ev.ClientData(NOW, encode_request(ApiKey.ApiVersions, 3, 7, "c", client_software_name="sarama",
                                                  client_software_version="1.22.0")))
    end = crossing(core, scene, probe=True)
    probe(core, B_AT, end, len(scene.c))
    assert core.throttling.backoff.verdict == UNKNOWN and core.throttling.backoff.strikes == 1
    core.handle(ev.ClientData(end - 0.1, scene.c + d))   # (what the socket held, read once unmuted)
    x_c = next_throttle(core, end, scene.c)             # not judged yet: the broker's throttle
    core.handle(ev.UpstreamData(end + LATENCY, pb.produce_response(9, 3)))
    c_end = core.throttling.muted_until
    assert x_c > 3 * scene.cost(scene.c)
    probe(core, end + LATENCY, c_end, len(d))
    assert core.throttling.backoff.verdict == IGNORES
    assert recorder.ignored == [("sarama", "1.22.0", "observed")]
    muted = next_throttle(core, c_end, d)
    assert muted > 3 * scene.cost(d), "the broker's throttle, not its own cost"
    core.handle(ev.UpstreamData(c_end + LATENCY, pb.produce_response(9, 4)))
    assert recorder.ignored == [("sarama", "1.22.0", "observed")] * 2


def test_a_client_that_waits_out_its_throttle_honours_it_and_a_late_probe_says_nothing() -> None:
    scene = Scene(9)
    core = connected_core(scene.config(), pacing=True)
    end = crossing(core, scene, probe=True)
    probe(core, B_AT, end, 0)
    assert core.throttling.backoff.verdict == HONOURS
    # Another connection whose probe only fires after its mute ended learns nothing from it: a client
    # that waited exactly its throttle may be sending again by then.
    late = connected_core(scene.config(), pacing=True)
    end = crossing(late, scene, probe=True)
    play(late, [(ev.TimerFired(end + 0.001, 5000), [ev.Unmute(MuteReason.THROTTLED)])])
    assert late.throttling.backoff.verdict == UNKNOWN


def test_a_throttled_response_right_after_another_is_not_probed() -> None:
    """A's and B's responses come back together: the client may rightly refill the slot A's answer
    freed while B's throttle runs, so B's mute is not probed (its timer stays at the mute's end) and
    the client is not judged on it."""
    scene = Scene(9)
    core = connected_core(scene.config(), pacing=True)
    x_b = scene.cost(scene.b)
    core.handle(ev.ClientData(NOW, scene.a + scene.b))
    play(core, [(ev.UpstreamData(NOW + LATENCY, pb.produce_response(9, 1) + pb.produce_response(9, 2)),
                 [to_client(pb.produce_response(9, 1)),
                  to_client(pb.produce_response(9, 2, throttle_ms=round(x_b * 1000)))])])
    assert core.throttling.muted_until == approx(NOW + x_b)
    assert core.throttling.backoff.verdict == UNKNOWN


def test_acks_0_and_old_fetches_are_paced_too() -> None:
    """An acks=0 Produce has no response to carry a throttle, and Fetch v7 no client-side throttling
    (v8+): both are paced. For Fetch the scene's sizes are its responses' (R less its size prefix,
    FetchResponse.sizeOf), charged when each comes back; the requests go one at a time."""
    scene = Scene(7, acks=0)
    core = connected_core(scene.config(), pacing=True)
    x_b = scene.cost(scene.b)
    play(core, [(ev.ClientData(NOW, scene.a + scene.b + scene.c),
                 [to_upstream(scene.a), to_upstream(scene.b), ev.Mute(MuteReason.THROTTLED),
                  ev.SetTimer(approx(NOW + x_b))])])
    assert next_throttle(core, core.throttling.muted_until, scene.c) == approx(scene.cost(scene.c))

    responses = [pb.fetch_response(7, i, records=n) for i, n in ((1, 12), (2, 3), (3, 1))]
    quota = size(responses[0]) / 10
    fetch = connected_core({"window_size_seconds": 1, "window_count": 11,
                            "entities": [{"client_id": "c", "consumer_byte_rate": quota}]}, pacing=True)
    fetch.handle(ev.ClientData(NOW, b"".join(pb.fetch_request(7, i, "c") for i in (1, 2, 3))))
    fetch.handle(ev.UpstreamData(NOW, responses[0]))                      # the allowance: no throttle
    actions = fetch.handle(ev.UpstreamData(NOW, responses[1]))            # crosses it
    x_b = size(responses[1]) / quota
    assert ev.SetTimer(approx(NOW + x_b)) in actions
    fetch.handle(ev.TimerFired(NOW + x_b))
    delivered = fetch.handle(ev.UpstreamData(NOW + x_b, responses[2]))[0]
    assert pb.throttle_of(b"".join(delivered.parts), ApiKey.Fetch, 7) == round(size(responses[2]) / quota * 1000)


def test_a_client_that_closes_while_throttled_has_what_it_left_dropped() -> None:
    """Issue 20, a client that gives up: its requests pipelined behind the mute were read but never
    forwarded. EOF: they are dropped (counted, logged) and the connection closes once nothing is
    owed; nothing more reaches the upstream."""
    recorder, scene = Recorder(), Scene(3)
    core = connected_core(scene.config(), observer=recorder)
    crossing(core, scene, probe=False, frames=scene.a + scene.b + scene.c + pb.produce_frame("t", 3, 4, "c", records=1))
    play(core, [(ev.ClientEof(NOW + 1), [ev.Mute(MuteReason.CLOSING), ev.Close("client_closed")])])
    assert recorder.dropped == [2]


def test_a_close_seen_on_the_muted_socket_drops_what_is_left_before_anything_more_is_read() -> None:
    """The client closed while muted: kqp does not read the socket, so the edge tells the core at the
    timer (`TimerFired.client_gone`, socket_probe.py). The requests still owed a response get it;
    the one read but not forwarded is dropped; nothing more is read."""
    recorder, scene = Recorder(), Scene(3)
    core = connected_core(scene.config(), observer=recorder)
    x_b = scene.cost(scene.b)
    core.handle(ev.ClientData(NOW, scene.a + scene.b + scene.c))
    play(core, [
        (ev.TimerFired(NOW + x_b / 2, None, True),
         [ev.Mute(MuteReason.CLOSING), ev.SetTimer(approx(NOW + x_b))]),
        (ev.UpstreamData(NOW + 1, pb.produce_response(3, 1) + pb.produce_response(3, 2)),
         [to_client(pb.produce_response(3, 1)), to_client(pb.produce_response(3, 2, throttle_ms=round(x_b * 1000))),
          ev.Close("client_closed")]),
    ])
    assert recorder.dropped == [1]


def test_a_client_that_closes_while_throttled_mid_frame_gave_up() -> None:
    """A client giving up under a throttle often leaves the start of its next request in kqp (read
    before the mute): that is a client that closed (`client_closed`, what is owed still goes), not a
    truncated frame, which unthrottled, or while the upstream connects, is a `protocol_error`."""
    recorder, scene = Recorder(), Scene(3)
    core = connected_core(scene.config(), observer=recorder)
    x_b = scene.cost(scene.b)
    core.handle(ev.ClientData(NOW, scene.a + scene.b + scene.c[:10]))
    play(core, [
        (ev.ClientEof(NOW + x_b / 2), [ev.Mute(MuteReason.CLOSING)]),
        (ev.UpstreamData(NOW + 1, pb.produce_response(3, 1) + pb.produce_response(3, 2)),
         [to_client(pb.produce_response(3, 1)), to_client(pb.produce_response(3, 2, throttle_ms=round(x_b * 1000))),
          ev.Close("client_closed")]),
    ])
    assert recorder.dropped == []


def test_a_reset_drops_what_was_read_and_not_forwarded() -> None:
    recorder, scene = Recorder(), Scene(3)
    core = connected_core(scene.config(), observer=recorder)
    core.handle(ev.ClientData(NOW, scene.a + scene.b + scene.c))
    play(core, [(ev.ClientLost(NOW + 1), [ev.Close("client_closed")])])
    assert recorder.dropped == [1]
