"""FlowControl: the edge's per-side reading, following what the core's mute reasons say.

The core keeps the reasons (`MuteState`); once per event the edge tells each side's FlowControl
whether it may be read (`sync`), so a reason lifted and another set by the same event cost the
transport no call; pausing and resuming are idempotent, and a transport attached late takes the
state held. The transport here is a plain recorder of the two calls a real one gets.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kqp.proxy.connection.events import MuteReason, Side
from kqp.proxy.connection.mute import MuteState
from kqp.proxy.runtime.flow_control import FlowControl

CLIENT_REASONS = [r for r in MuteReason if r.side is Side.CLIENT]


class Transport:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


def attached() -> tuple[FlowControl, Transport, MuteState]:
    flow, transport = FlowControl(), Transport()
    flow.attach(transport)
    return flow, transport, MuteState()


def test_a_side_is_read_again_only_when_its_last_reason_is_gone() -> None:
    flow, transport, mutes = attached()
    mutes.mute(MuteReason.THROTTLED)
    mutes.mute(MuteReason.BACKPRESSURE)
    flow.sync(not mutes.muted(Side.CLIENT))
    mutes.unmute(MuteReason.BACKPRESSURE)   # the upstream drained: the throttle still holds
    flow.sync(not mutes.muted(Side.CLIENT))
    assert transport.calls == ["pause"] and not flow.reading
    mutes.unmute(MuteReason.THROTTLED)
    flow.sync(not mutes.muted(Side.CLIENT))
    assert transport.calls == ["pause", "resume"] and flow.reading


def test_a_reason_lifted_and_another_set_in_one_event_costs_nothing() -> None:
    flow, transport, mutes = attached()
    mutes.mute(MuteReason.RESPONSE_PENDING)
    flow.sync(not mutes.muted(Side.CLIENT))
    mutes.unmute(MuteReason.RESPONSE_PENDING)   # the response is back ...
    mutes.mute(MuteReason.RESPONSE_PENDING)     # ... and the next request is read and held
    flow.sync(not mutes.muted(Side.CLIENT))
    assert transport.calls == ["pause"]


def test_the_sides_are_apart_and_a_late_transport_takes_the_state_held() -> None:
    flow, mutes = FlowControl(), MuteState()
    mutes.mute(MuteReason.CLIENT_SLOW)
    assert mutes.muted(Side.UPSTREAM) and not mutes.muted(Side.CLIENT)
    flow.sync(not mutes.muted(Side.UPSTREAM))   # no transport yet: nothing to do
    transport = Transport()
    flow.attach(transport)
    flow.sync(not mutes.muted(Side.UPSTREAM))
    assert transport.calls == ["pause"]


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(CLIENT_REASONS), st.booleans()), max_size=60))
def test_the_transport_follows_the_reasons_with_alternating_calls(ops: list[tuple[bool, MuteReason, bool]]) -> None:
    flow, transport, mutes = attached()
    held: set[MuteReason] = set()
    for mute, reason, sync in ops:
        (mutes.mute if mute else mutes.unmute)(reason)
        (held.add if mute else held.discard)(reason)
        if sync:
            flow.sync(not mutes.muted(Side.CLIENT))
            assert flow.reading == (not held)
    flow.sync(not mutes.muted(Side.CLIENT))
    assert flow.reading == (not held)
    assert all(a != b for a, b in zip(transport.calls, transport.calls[1:], strict=False)), "never twice the same"
    assert transport.calls[:1] in ([], ["pause"])
