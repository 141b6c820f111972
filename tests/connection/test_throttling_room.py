"""The throttling room alone: one throttle per request, and mutes told to the observer in pairs.

Pure: violations are written by hand, the loop time is a number, the observer a recorder. The
rules are KafkaApis' (the largest throttle wins, ties name the request quota, Java's Math.round to
whole milliseconds, 0 ms is no throttle) and ThrottledChannel's (the mute ends when its time is up,
or with the connection).
"""

from __future__ import annotations

from helpers.playbook import Recorder

from kqp.proxy.connection.events import Mute, MuteReason, SetTimer, Unmute
from kqp.proxy.connection.mute import MuteState
from kqp.proxy.connection.plans import PASS, Flight
from kqp.proxy.connection.throttling import Throttle, Throttling
from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal, QuotaKey, QuotaType
from kqp.quotas.throttle import ThrottleLine

NOW = 100.0
P = Principal("ANONYMOUS", "c")
KEY = QuotaKey("", "c")
BYTES, RATE, MUTATION = QuotaType.PRODUCER_BYTE_RATE, QuotaType.REQUEST_RATE, QuotaType.CONTROLLER_MUTATION_RATE


def entry(api_key: int = 0) -> Flight:
    return Flight(1, api_key, 9 if api_key == 0 else 4, P, NOW, PASS)


def room() -> tuple[Throttling, Recorder, MuteState]:
    recorder, mutes = Recorder(), MuteState()
    return Throttling(recorder, mutes), recorder, mutes


def test_the_largest_throttle_wins_and_ties_name_the_request_quota() -> None:
    throttling, _, _ = room()
    # 0.25 s of bytes against 0.75 s of requests: the request quota's 750 ms.
    assert throttling.decide(entry(), [Violation(BYTES, 0.25, KEY), Violation(RATE, 0.75, KEY)]) == \
        Throttle(750, 0.75, P, RATE)
    # A tie: KafkaApis' `bandwidth > request` sends it to the request quota.
    assert throttling.decide(entry(), [Violation(BYTES, 0.5, KEY), Violation(RATE, 0.5, KEY)]).quota_type is RATE


def test_a_throttle_that_rounds_to_0_ms_is_none() -> None:
    throttling, _, _ = room()
    assert throttling.decide(entry(), []) is None
    assert throttling.decide(entry(), [Violation(BYTES, 0.0004, KEY)]) is None     # Math.round(0.4) = 0
    assert throttling.decide(entry(), [Violation(BYTES, 0.0005, KEY)]).ms == 1      # half up: 1 ms


def test_a_throttle_is_counted_once_and_mutes_until_its_time_is_up() -> None:
    throttling, recorder, mutes = room()
    out: list = []
    throttling.throttle(throttling.decide(entry(), [Violation(BYTES, 2.0, KEY)]), NOW, out)
    assert out == [Mute(MuteReason.THROTTLED), SetTimer(NOW + 2.0)] and MuteReason.THROTTLED in mutes
    assert recorder.throttles == [("c", BYTES, 2.0)] and recorder.mutes == [("start", "c", BYTES)]
    out.clear()
    assert not throttling.timer_fired(NOW + 1.0, out) and out == [SetTimer(NOW + 2.0)]   # early: wait on
    out.clear()
    assert throttling.timer_fired(NOW + 2.0, out) and out == [Unmute(MuteReason.THROTTLED)]
    assert recorder.mutes == [("start", "c", BYTES), ("end", "c", BYTES)] and not throttling.muted


def test_a_held_mute_is_counted_with_its_response_not_twice() -> None:
    throttling, recorder, _ = room()
    out: list = []
    throttling.hold(throttling.decide(entry(), [Violation(BYTES, 2.0, KEY)]), NOW, out)   # read over quota
    assert recorder.mutes == [("start", "c", BYTES)] and recorder.throttles == []
    # The response, 10 ms later, brings the request's throttle: counted now, the mute runs from now.
    throttling.throttle(throttling.decide(entry(), [Violation(BYTES, 2.0, KEY)]), NOW + 0.01, out)
    assert recorder.throttles == [("c", BYTES, 2.0)] and recorder.mutes == [("start", "c", BYTES)]
    assert out[-1] == SetTimer(NOW + 2.01)


def test_a_longer_throttle_of_another_cause_takes_the_mute_over_and_a_shorter_one_does_not() -> None:
    throttling, recorder, _ = room()
    out: list = []
    throttling.throttle(throttling.decide(entry(), [Violation(RATE, 1.0, KEY)]), NOW, out)
    throttling.throttle(throttling.decide(entry(), [Violation(MUTATION, 0.5, KEY)]), NOW, out)   # ends sooner
    assert recorder.mutes == [("start", "c", RATE)]
    throttling.throttle(throttling.decide(entry(), [Violation(BYTES, 3.0, KEY)]), NOW, out)      # holds longer
    assert recorder.mutes == [("start", "c", RATE), ("end", "c", RATE), ("start", "c", BYTES)]
    assert throttling.cause == (P, BYTES) and throttling.muted_until == NOW + 3.0
    throttling.closed()   # the connection closes while muted: the mute ends with it
    assert recorder.mutes[-1] == ("end", "c", BYTES) and not throttling.muted


def test_the_gate_follows_the_lines_of_rate_violations_and_their_principal_only() -> None:
    """`gate` holds a request of the throttled request's API while a line of that throttle is more
    than a millisecond ahead (another connection of the key was charged since); a request quota's
    violation keeps no line (KIP-124 caps it at one window), and another principal is not held."""
    throttling, _, _ = room()
    line, out = ThrottleLine(NOW + 2.0, 11.0), []
    throttling.throttle(throttling.decide(entry(), [Violation(RATE, 0.5, KEY, line=line)]), NOW, out)
    assert throttling.timer_fired(NOW + 0.5, out) and not throttling.gate(0, P, NOW + 0.5, out)
    throttling.throttle(throttling.decide(entry(), [Violation(BYTES, 0.5, KEY, line=line)]), NOW + 0.5, out)
    assert throttling.timer_fired(NOW + 1.0, out)
    out.clear()
    assert not throttling.gate(1, P, NOW + 1.0, out), "a Fetch is not held for a Produce's line"
    assert not throttling.gate(0, Principal("ANONYMOUS", "d"), NOW + 1.0, out)
    assert throttling.gate(0, P, NOW + 1.0, out) and out == [Mute(MuteReason.THROTTLED), SetTimer(NOW + 2.0)]
    assert throttling.timer_fired(NOW + 2.0, out)
    line.until = NOW + 2.0009   # moved by under a millisecond: a rounding, not a sibling's usage
    assert not throttling.gate(0, P, NOW + 2.0, out)


def test_a_steady_request_quota_gates_the_next_produce_until_the_keys_debt_is_repaid() -> None:
    """A steady request quota's throttle is capped at a window (KIP-124), its line is the key's whole
    debt: several connections each muted a window would run the key over its quota, so the line holds
    the connection's next Produce (and Fetch) until it, never its heartbeats."""
    throttling, _, _ = room()
    line, out = ThrottleLine(NOW + 1.5, 2.2), []
    violation = Violation(RATE, 0.2, KEY, line=line, steady=True)
    throttling.throttle(throttling.decide(entry(), [violation]), NOW, out)
    assert throttling.timer_fired(NOW + 0.2, out)
    out.clear()
    assert throttling.gate(0, P, NOW + 0.2, out) and out[-1] == SetTimer(NOW + 1.5)
    heartbeat, _, _ = room()
    heartbeat.throttle(heartbeat.decide(entry(api_key=12), [violation]), NOW, out)
    assert heartbeat.timer_fired(NOW + 0.2, out) and not heartbeat.gate(12, P, NOW + 0.2, out)


def test_the_gate_holds_one_request_a_span_at_most_and_never_more_than_ten_seconds() -> None:
    """A client counts the gate's wait, which it was not told, against its request timeout (30 s by
    default): one request is held, in all, no longer than the quota's span (here 2.2 s), nor 10 s."""
    for span, cap in ((2.2, 2.2), (30.0, 10.0)):
        throttling, _, _ = room()
        line, out = ThrottleLine(NOW + 1.0, span), []
        throttling.throttle(throttling.decide(entry(), [Violation(BYTES, 0.5, KEY, line=line)]), NOW, out)
        assert throttling.timer_fired(NOW + 0.5, out)
        out.clear()
        assert throttling.gate(0, P, NOW + 0.5, out) and out[-1] == SetTimer(NOW + 1.0)   # the line
        # At the line the key's other connections have moved it far ahead: held again, but only
        # until its cap from when it was first held, 100.5 + cap.
        line.until = NOW + 100.0
        assert throttling.timer_fired(NOW + 1.0, out)
        out.clear()
        assert throttling.gate(0, P, NOW + 1.0, out) and out[-1] == SetTimer(NOW + 0.5 + cap)
        assert throttling.timer_fired(NOW + 0.5 + cap, out)
        assert not throttling.gate(0, P, NOW + 0.5 + cap, out), "held its cap: it goes"
        assert throttling.gated_since is None, "the next request has a cap of its own"


def test_the_gate_lets_a_request_go_at_its_cap_whatever_the_float_rounding() -> None:
    """The timer at the cap's end reads the loop clock as exactly `since + cap`, and in binary floating
    point `(since + cap) - since` can fall short of `cap` (101.101 - 100.001 = 1.0999999999999943 <
    1.1, a span of 11 windows of 0.1 s). The gate must let the request go then: holding it again
    until the same instant mutes nothing, and the core's read loop would take it again at once, for
    ever (seen with Spark's consumers under a prefix quota: one kqp spinning, every client stalled).
    Whenever the gate holds a request, the connection is muted."""
    span, since = 0.1 * 11, 100.001
    assert (since + span) - since < span   # the rounding this test is about
    throttling, _, _ = room()
    line, out = ThrottleLine(since, span), []
    throttling.throttle(throttling.decide(entry(), [Violation(BYTES, 0.101, KEY, line=line)]), since - 0.101, out)
    assert throttling.timer_fired(since, out)
    line.until = since + 100.0   # the key's other connections hold it far over: the cap decides
    out.clear()
    assert throttling.gate(0, P, since, out) and throttling.muted and out[-1] == SetTimer(since + span)
    assert throttling.timer_fired(since + span, out) and not throttling.muted
    assert not throttling.gate(0, P, since + span, out), "held its cap: it goes"
    assert not throttling.muted and throttling.gated_since is None


def test_a_paced_throttle_keeps_no_line_and_ends_an_earlier_one() -> None:
    """Pacing (issue 20) mutes a client that cannot back off (Produce v5 here) for its request's
    queued cost, which already shares the key among its connections: the gate must not hold it for
    the key's whole throttle. Its unpaced throttle (pace no shorter than the throttle) kept a line."""
    throttling = Throttling(Recorder(), MuteState(), pacing=lambda: True)
    v5 = Flight(1, 0, 5, P, NOW, PASS)
    line, out = ThrottleLine(NOW + 3.0, 11.0), []
    unpaced = throttling.decide(v5, [Violation(BYTES, 0.5, KEY, pace_seconds=0.5, line=line)])
    assert not unpaced.paced and unpaced.lines == (line,)
    throttling.throttle(unpaced, NOW, out)
    assert throttling.timer_fired(NOW + 0.5, out) and throttling.gate(0, P, NOW + 0.5, out)
    assert throttling.timer_fired(NOW + 3.0, out) and not throttling.gate(0, P, NOW + 3.0, out)
    # Then paced: 0.2 s of cost against a 2 s throttle. No line kept, the earlier one dropped.
    line.until = NOW + 5.0
    paced = throttling.decide(v5, [Violation(BYTES, 2.0, KEY, pace_seconds=0.2, line=line)])
    assert paced.paced and paced.lines == () and paced.mute_seconds == 0.2
    throttling.throttle(paced, NOW + 3.0, out)
    assert throttling.timer_fired(NOW + 3.2, out) and not throttling.gate(0, P, NOW + 3.2, out)


def test_an_observed_throttle_is_counted_once_with_the_response_and_never_muted() -> None:
    """`mode: observe`: decided as if enforced (2 s), held for nothing at read, counted once when settled."""
    throttling, recorder, mutes = room()
    flight, out = entry(), []
    line = ThrottleLine(NOW + 2.0, 11.0)
    flight.throttle = throttling.decide(flight, [Violation(BYTES, 2.0, KEY, line=line, observed=True)])
    assert flight.throttle is not None and flight.throttle.observed and flight.throttle.acted is None
    throttling.hold(flight.throttle, NOW, out)
    assert out == [] and not mutes.blocks_requests
    throttling.throttle(throttling.settle(flight, [], NOW + 0.01), NOW + 0.01, out)
    assert recorder.observed == [("c", BYTES, 2.0)] and recorder.throttles == [] and recorder.mutes == []
    assert out == [] and throttling.lines == {}, "an observed line gates nothing"


def test_beside_an_enforced_throttle_an_observed_larger_one_is_counted_and_the_enforced_one_acted_on() -> None:
    """Observed 2 s of bytes, enforced 0.5 s of requests: enforcing both would have cost 2 s (counted);
    the client gets the 500 ms the enforced quota alone decides. An observed throttle smaller than
    the enforced one is not counted: enforcing it would have changed nothing."""
    throttling, recorder, _ = room()
    flight, out = entry(), []
    flight.throttle = throttling.decide(flight, [Violation(BYTES, 2.0, KEY, observed=True), Violation(RATE, 0.5, KEY)])
    told = throttling.settle(flight, [], NOW)
    assert told == Throttle(500, 0.5, P, RATE) and recorder.observed == [("c", BYTES, 2.0)]
    throttling.throttle(told, NOW, out)
    assert recorder.throttles == [("c", RATE, 0.5)] and out[0] == Mute(MuteReason.THROTTLED)
    # The response adds a larger observed request-quota violation: still one count, the largest.
    later = entry()
    later.throttle = throttling.decide(later, [Violation(BYTES, 0.2, KEY)])
    assert throttling.settle(later, [Violation(RATE, 3.0, KEY, observed=True)], NOW) == Throttle(200, 0.2, P, BYTES)
    assert recorder.observed == [("c", BYTES, 2.0), ("c", RATE, 3.0)]
    smaller = entry()
    assert throttling.settle(smaller, [Violation(BYTES, 1.0, KEY), Violation(RATE, 0.4, KEY, observed=True)],
                             NOW) == Throttle(1000, 1.0, P, BYTES)
    assert len(recorder.observed) == 2
