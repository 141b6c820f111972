"""MuteState: independent named reasons to stop reading a client, combined as aiohttp does.

Reading must stop on the first reason and resume only when the last one is gone, so that, e.g.,
the upstream draining its write buffer (backpressure) can never resume a connection that a KIP-219
throttle muted, and vice versa.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kqp.proxy.connection.mute import MuteReason, MuteState


class Reader:
    def __init__(self) -> None:
        self.events: list[str] = []

    def pause(self) -> None:
        self.events.append("pause")

    def resume(self) -> None:
        self.events.append("resume")


def make() -> tuple[MuteState, Reader]:
    reader = Reader()
    return MuteState(reader.pause, reader.resume), reader


def test_first_reason_pauses_last_reason_resumes() -> None:
    state, reader = make()
    state.mute(MuteReason.THROTTLED)
    state.mute(MuteReason.BACKPRESSURE)
    assert reader.events == ["pause"]
    state.unmute(MuteReason.BACKPRESSURE)      # backpressure gone, throttle still on
    assert reader.events == ["pause"] and state.muted
    assert MuteReason.THROTTLED in state and MuteReason.BACKPRESSURE not in state
    state.unmute(MuteReason.THROTTLED)
    assert reader.events == ["pause", "resume"] and not state.muted


def test_mute_and_unmute_are_idempotent() -> None:
    state, reader = make()
    state.mute(MuteReason.THROTTLED)
    state.mute(MuteReason.THROTTLED)
    state.unmute(MuteReason.CONNECTING)       # never muted for this reason: nothing happens
    assert reader.events == ["pause"]
    state.unmute(MuteReason.THROTTLED)
    state.unmute(MuteReason.THROTTLED)
    assert reader.events == ["pause", "resume"]
    assert state.reasons == frozenset()


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(list(MuteReason))), max_size=60))
def test_any_sequence_pauses_exactly_while_some_reason_is_held(ops: list[tuple[bool, MuteReason]]) -> None:
    state, reader = make()
    held: set[MuteReason] = set()
    for mute, reason in ops:
        (state.mute if mute else state.unmute)(reason)
        if mute:
            held.add(reason)
        else:
            held.discard(reason)
        assert state.reasons == frozenset(held)
        # pause and resume strictly alternate, and the last one says whether reading is stopped
        assert all(a != b for a, b in zip(reader.events, reader.events[1:], strict=False))
        assert (reader.events[-1:] == ["pause"]) == bool(held)
