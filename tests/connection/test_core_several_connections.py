"""Playbooks of one key's several connections: each request judged on the key's whole usage, as read.

A producer keeps one connection per broker, and all of them charge one sensor. KIP-219 mutes only the
connection that sent a request; nothing holds a sibling's request back (that would be a wait no
response tells). What keeps the key at its quota is that every request is charged as it is read and
decided on everything the key has used, whichever connection used it: under `steady` (the config
file's default) a request read while the key is in debt is told the whole debt, its siblings' part
included; under `sampled` (Kafka's arithmetic) the rate they raised together.

Quota arithmetic, steady: T = 1000 B/s over windows of 1 s x 11, a bucket holding Kafka's first
allowance, 10 x 1 s x T = 10 000 B; a Produce frame is charged as Kafka counts it, without its 4-byte
size prefix: `s(frame)`. After S bytes at once the throttle is X = (S - 10 000) / T.
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
STEADY = {"algorithm": "steady", "window_size_seconds": 1, "window_count": 11}
BYTES = {**STEADY, "entities": [{"client_id": "c", "producer_byte_rate": 1000}]}
FETCH = {**STEADY, "entities": [{"client_id": "c", "consumer_byte_rate": 1000}]}
MUTE, UNMUTE = ev.Mute(MuteReason.THROTTLED), ev.Unmute(MuteReason.THROTTLED)
V = 5   # Produce v5: no client-side throttling, so no back-off probe in the actions


def s(frame: bytes) -> int:
    return len(frame) - 4


def sibling(core: Connection, now: float, client: str = "test-client-2") -> Connection:
    """Another connection of the same process (one quota manager), e.g. to another broker."""
    other = Connection(core.wiring, "bootstrap", None, client)
    play(other, [connecting(now), connected(now)])
    return other


def test_a_siblings_request_read_in_the_keys_debt_is_told_the_whole_debt() -> None:
    """a's first Produce (10 records, ~10.2 kB) crosses the allowance: X_a = (s(a1) - 10 000) / T. b's,
    read 20 ms later on another connection, is charged on top: the key owes s(a1) + s(b1) - 10 000
    less the 20 ms of refill, all of which b is told and muted for. a's client comes back when its
    own throttle is over; by then the key still owes b's part, so a's next request is told that."""
    recorder = Recorder()
    a = connected_core(BYTES, NOW, recorder)
    b = sibling(a, NOW)
    a1, b1, a2 = (produce_frame("t", V, 1, "c", records=10), produce_frame("t", V, 1, "c", records=1),
                  produce_frame("t", V, 2, "c", records=1))
    ms_a = round((s(a1) - 10_000) / 1000 * 1000)
    play(a, [(ev.ClientData(NOW, a1), [to_upstream(a1), MUTE, ev.SetTimer(pytest.approx(NOW + ms_a / 1000))]),
             (ev.UpstreamData(NOW + 0.01, produce_response(V, 1)),
              [to_client(produce_response(V, 1, throttle_ms=ms_a))])])
    debt = (s(a1) + s(b1) - 10_000) / 1000 - 0.02   # the bucket refilled 20 ms meanwhile
    ms_b = round(debt * 1000)
    play(b, [(ev.ClientData(NOW + 0.02, b1),
              [to_upstream(b1), MUTE, ev.SetTimer(pytest.approx(NOW + 0.02 + ms_b / 1000))]),
             (ev.UpstreamData(NOW + 0.03, produce_response(V, 1)),
              [to_client(produce_response(V, 1, throttle_ms=ms_b))])])
    assert ms_b > ms_a, "b pays for a's usage too"
    # a's mute ends at its own throttle; a2 is read then, the key still in debt for b's part and its own.
    end_a = a.throttling.muted_until
    actions = a.handle(ev.ClientData(end_a, a2))
    assert actions == []   # the bytes wait in the muted connection until the timer
    actions = a.handle(ev.TimerFired(end_a))
    owed = (s(a1) + s(b1) + s(a2) - 10_000) / 1000 - (end_a - NOW)
    assert actions == [UNMUTE, to_upstream(a2), MUTE, ev.SetTimer(pytest.approx(end_a + round(owed * 1000) / 1000))]
    assert [t for _, _, t in recorder.throttles] == [ms_a / 1000, ms_b / 1000]
    # Nothing waited untold: every mute began with a throttle decided for the request that caused it.
    assert recorder.mutes.count(("start", "c", "producer_byte_rate")) == 3


def test_another_client_id_is_judged_on_its_own_key() -> None:
    a = connected_core(BYTES, NOW)
    d = sibling(a, NOW)
    a1 = produce_frame("t", V, 1, "c", records=12)
    d1 = produce_frame("t", V, 1, "d", records=12)
    assert a.handle(ev.ClientData(NOW, a1))[1] == MUTE
    play(d, [(ev.ClientData(NOW, d1), [to_upstream(d1)])])   # d has no quota at all


def test_a_siblings_fetch_read_in_the_keys_debt_is_throttled_when_its_response_is_charged() -> None:
    """Fetch responses are charged as they come back, so a Fetch is decided then: b's Fetch goes while
    the key is in a's debt (nothing holds it), its response is charged on top of a's, and it is told
    the whole debt as it goes."""
    a = connected_core(FETCH, NOW)
    b = sibling(a, NOW)
    big = fetch_response(11, 1, records=11)
    ms_a = round((s(big) - 10_000) / 1000 * 1000)
    assert ms_a > 0
    a.handle(ev.ClientData(NOW, fetch_request(11, 1, "c")))
    actions = a.handle(ev.UpstreamData(NOW + 0.01, big))
    assert MUTE in actions and a.throttling.muted_until == pytest.approx(NOW + 0.01 + ms_a / 1000)
    b.handle(ev.ClientData(NOW + 0.02, fetch_request(11, 1, "c")))
    small = fetch_response(11, 1, records=1)
    actions = b.handle(ev.UpstreamData(NOW + 0.03, small))
    debt = (s(big) + s(small) - 10_000) / 1000 - 0.02   # the bucket, made at the first charge, refilled 20 ms
    assert MUTE in actions and b.throttling.muted_until == pytest.approx(NOW + 0.03 + round(debt * 1000) / 1000)


def test_under_sampled_a_sibling_is_throttled_by_the_rate_they_raised_together() -> None:
    """Kafka's arithmetic (`algorithm: sampled`): a fresh sensor reads S bytes as S / W with W = 10 s,
    X = S / 1000 - W. a1 crosses it; b1, 20 ms later on another connection, reads their sum."""
    sampled = {"window_size_seconds": 1, "window_count": 11, "algorithm": "sampled",
               "entities": [{"client_id": "c", "producer_byte_rate": 1000}]}
    a = connected_core(sampled, NOW)
    b = sibling(a, NOW)
    a1, b1 = produce_frame("t", V, 1, "c", records=10), produce_frame("t", V, 1, "c", records=1)
    a.handle(ev.ClientData(NOW, a1))
    x_b = (s(a1) + s(b1)) / 1000 - 10.02
    play(b, [(ev.ClientData(NOW + 0.02, b1),
              [to_upstream(b1), MUTE, ev.SetTimer(pytest.approx(NOW + 0.02 + x_b, abs=6e-4))])])
