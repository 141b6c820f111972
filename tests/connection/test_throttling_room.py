"""The throttling room alone: one throttle per request, told as it is muted, mutes in pairs.

Pure: violations are written by hand, the loop time is a number, the observer a recorder. The
rules are KafkaApis' (the largest throttle wins, ties name the request quota, Java's Math.round to
whole milliseconds, 0 ms is no throttle) and ThrottledChannel's (the mute ends when its time is up,
or with the connection), with KIP-219's promise: what the response tells is how long the connection
is muted.
"""

from __future__ import annotations

from helpers.host import PartHost
from helpers.playbook import Recorder

from kqp.proxy.connection.events import Mute, MuteReason, SetTimer, Unmute
from kqp.proxy.connection.plans import PASS, Flight, Plan, Progress
from kqp.proxy.connection.throttling import Throttle, Throttling
from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal, QuotaKey, QuotaType

NOW = 100.0
P = Principal("ANONYMOUS", "c")
KEY = QuotaKey("", "c")
BYTES, RATE, MUTATION = QuotaType.PRODUCER_BYTE_RATE, QuotaType.REQUEST_RATE, QuotaType.CONTROLLER_MUTATION_RATE


def entry(api_key: int = 0, version: int | None = None, plan: Plan = PASS) -> Flight:
    return Flight(1, api_key, (9 if api_key == 0 else 4) if version is None else version, P, NOW, plan,
                  Progress())


def room(pacing: bool = False) -> tuple[Throttling, Recorder, PartHost]:
    recorder, host = Recorder(), PartHost()
    return Throttling(host, recorder, pacing=lambda: pacing), recorder, host


def test_the_largest_throttle_wins_and_ties_name_the_request_quota() -> None:
    throttling, _, _ = room()
    # 0.25 s of bytes against 0.75 s of requests: the request quota's 750 ms, muted until 0.75 s on.
    assert throttling.decide(entry(), [Violation(BYTES, 0.25, KEY), Violation(RATE, 0.75, KEY)], NOW) == \
        Throttle(750, NOW + 0.75, P, RATE)
    # A tie: KafkaApis' `bandwidth > request` sends it to the request quota.
    assert throttling.decide(entry(), [Violation(BYTES, 0.5, KEY), Violation(RATE, 0.5, KEY)], NOW).quota_type is RATE


def test_a_throttle_that_rounds_to_0_ms_is_none_and_the_mute_is_as_long_as_the_ms_told() -> None:
    throttling, _, _ = room()
    assert throttling.decide(entry(), [], NOW) is None
    assert throttling.decide(entry(), [Violation(BYTES, 0.0004, KEY)], NOW) is None     # Math.round(0.4) = 0
    one = throttling.decide(entry(), [Violation(BYTES, 0.0005, KEY)], NOW)               # half up: 1 ms
    assert one is not None and (one.ms, one.until) == (1, NOW + 0.001)


def test_a_throttle_mutes_from_its_decision_until_its_time_is_up_and_is_counted_as_told() -> None:
    throttling, recorder, host = room()
    flight = entry()
    throttle = throttling.decide(flight, [Violation(BYTES, 2.0, KEY)], NOW)
    assert throttle is not None
    throttling.mute(flight, throttle, NOW)
    assert host.taken() == [Mute(MuteReason.THROTTLED), SetTimer(NOW + 2.0)] and MuteReason.THROTTLED in host.mutes
    assert recorder.mutes == [("start", "c", BYTES)] and recorder.throttles == [], "counted when told"
    throttling.told(flight, throttle, throttle.ms, NOW + 0.01)   # the response went, 10 ms later
    assert recorder.throttles == [("c", BYTES, 2.0)] and throttling.muted_until == NOW + 2.0
    host.taken()
    assert not throttling.timer_fired(NOW + 1.0) and host.taken() == [SetTimer(NOW + 2.0)]   # early: wait on
    assert throttling.timer_fired(NOW + 2.0) and host.taken() == [Unmute(MuteReason.THROTTLED)]
    assert recorder.mutes == [("start", "c", BYTES), ("end", "c", BYTES)] and not throttling.muted


def test_a_request_without_a_response_counts_its_throttle_as_told_when_it_is_decided() -> None:
    throttling, recorder, _ = room()
    flight = entry(plan=Plan(expects_response=False))
    throttle = throttling.decide(flight, [Violation(BYTES, 1.5, KEY)], NOW)
    assert throttle is not None
    throttling.mute(flight, throttle, NOW)
    assert recorder.throttles == [("c", BYTES, 1.5)]


def test_a_longer_throttle_of_another_cause_takes_the_mute_over_and_a_shorter_one_does_not() -> None:
    throttling, recorder, _ = room()

    def throttled(violation: Violation) -> None:
        flight = entry()
        throttle = throttling.decide(flight, [violation], NOW)
        assert throttle is not None
        throttling.mute(flight, throttle, NOW)

    throttled(Violation(RATE, 1.0, KEY))
    throttled(Violation(MUTATION, 0.5, KEY))   # ends sooner
    assert recorder.mutes == [("start", "c", RATE)]
    throttled(Violation(BYTES, 3.0, KEY))      # holds longer
    assert recorder.mutes == [("start", "c", RATE), ("end", "c", RATE), ("start", "c", BYTES)]
    assert throttling.cause == (P, BYTES) and throttling.muted_until == NOW + 3.0
    throttling.closed()   # the connection closes while muted: the mute ends with it
    assert recorder.mutes[-1] == ("end", "c", BYTES) and not throttling.muted


def test_a_blind_client_is_paced_when_pacing_is_on_and_the_pace_is_shorter() -> None:
    """Produce v5 cannot back off by itself: with pacing on it is muted for its pace (0.2 s), and told
    that; a client that backs off (v9), or pacing off, gets the throttle (2 s)."""
    paced_room, _, _ = room(pacing=True)
    violation = Violation(BYTES, 2.0, KEY, pace_seconds=0.2)
    paced = paced_room.decide(entry(version=5), [violation], NOW)
    assert paced is not None and paced.paced and (paced.ms, paced.until) == (200, NOW + 0.2)
    backs_off = paced_room.decide(entry(version=9), [violation], NOW)
    assert backs_off is not None and not backs_off.paced and backs_off.ms == 2000
    plain, _, _ = room(pacing=False)
    unpaced = plain.decide(entry(version=5), [violation], NOW)
    assert unpaced is not None and unpaced.ms == 2000
    steady = paced_room.decide(entry(version=5), [Violation(BYTES, 2.0, KEY)], NOW)   # a debt: no pace
    assert steady is not None and steady.ms == 2000


def test_an_observed_throttle_is_counted_at_its_decision_and_never_muted() -> None:
    """`mode: observe`: decided as if enforced (2 s), counted once, nothing told or muted."""
    throttling, recorder, host = room()
    assert throttling.decide(entry(), [Violation(BYTES, 2.0, KEY, observed=True)], NOW) is None
    assert recorder.observed == [("c", BYTES, 2.0)] and recorder.throttles == [] and recorder.mutes == []
    assert not host.mutes.blocks_requests


def test_beside_an_enforced_throttle_an_observed_larger_one_is_counted_and_the_enforced_one_acted_on() -> None:
    """Observed 2 s of bytes, enforced 0.5 s of requests: enforcing both would have cost 2 s (counted);
    the client gets the 500 ms the enforced quota alone decides. An observed throttle smaller than
    the enforced one is not counted: enforcing it would have changed nothing."""
    throttling, recorder, _ = room()
    told = throttling.decide(entry(), [Violation(BYTES, 2.0, KEY, observed=True), Violation(RATE, 0.5, KEY)], NOW)
    assert told == Throttle(500, NOW + 0.5, P, RATE) and recorder.observed == [("c", BYTES, 2.0)]
    assert throttling.decide(entry(), [Violation(BYTES, 1.0, KEY), Violation(RATE, 0.4, KEY, observed=True)],
                             NOW) == Throttle(1000, NOW + 1.0, P, BYTES)
    assert len(recorder.observed) == 1
