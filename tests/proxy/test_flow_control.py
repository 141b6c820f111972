"""FlowControl: the edge's per-side reading, driven by the core's Mute/Unmute actions alone.

A side is paused on its first reason and resumed when its last one is gone; changes are applied
once per event (`sync`), so a reason lifted and another set by the same event cost the transport
no call; pausing and resuming are idempotent, and a transport attached late takes the state held.
The transport here is a plain recorder of the two calls a real one gets.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kqp.proxy.connection.events import MuteReason
from kqp.proxy.runtime.flow_control import FlowControl

CLIENT_REASONS = [r for r in MuteReason if r is not MuteReason.CLIENT_SLOW]


class Transport:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


def attached() -> tuple[FlowControl, Transport]:
    flow, transport = FlowControl(), Transport()
    flow.attach(transport)
    return flow, transport


def test_a_side_is_read_again_only_when_its_last_reason_is_gone() -> None:
    flow, transport = attached()
    flow.mute(MuteReason.THROTTLED)
    flow.mute(MuteReason.BACKPRESSURE)
    flow.sync()
    flow.unmute(MuteReason.BACKPRESSURE)   # the upstream drained: the throttle still holds
    flow.sync()
    assert transport.calls == ["pause"] and not flow.reading
    flow.unmute(MuteReason.THROTTLED)
    flow.sync()
    assert transport.calls == ["pause", "resume"] and flow.reading


def test_a_reason_lifted_and_another_set_in_one_event_costs_nothing() -> None:
    flow, transport = attached()
    flow.mute(MuteReason.RESPONSE_PENDING)
    flow.sync()
    flow.unmute(MuteReason.RESPONSE_PENDING)   # the response is back ...
    flow.mute(MuteReason.RESPONSE_PENDING)     # ... and the next request is read and held
    flow.sync()
    assert transport.calls == ["pause"]


def test_sync_is_idempotent_and_a_late_transport_takes_the_state_held() -> None:
    flow = FlowControl()
    flow.mute(MuteReason.CLIENT_SLOW)
    flow.sync()                                # no transport yet: nothing to do
    transport = Transport()
    flow.attach(transport)
    flow.sync()
    assert transport.calls == ["pause"]


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(CLIENT_REASONS), st.booleans()), max_size=60))
def test_the_transport_follows_the_reasons_with_alternating_calls(ops: list[tuple[bool, MuteReason, bool]]) -> None:
    flow, transport = attached()
    held: set[MuteReason] = set()
    for mute, reason, sync in ops:
        (flow.mute if mute else flow.unmute)(reason)
        (held.add if mute else held.discard)(reason)
        if sync:
            flow.sync()
            assert flow.reading == (not held)
    flow.sync()
    assert flow.reading == (not held)
    assert all(a != b for a, b in zip(transport.calls, transport.calls[1:], strict=False)), "never twice the same"
    assert transport.calls[:1] in ([], ["pause"])
