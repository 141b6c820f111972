"""MuteState: independent named reasons to stop reading a side, combined as aiohttp does.

A side stops being read on its first reason and is read again only when its last one is gone, so
that, e.g., the upstream draining its write buffer (backpressure) can never resume a connection
that a KIP-219 throttle muted, and a slow client (which mutes the upstream side) never touches the
client side.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kqp.proxy.connection.events import MuteReason, Side
from kqp.proxy.connection.mute import BLOCKING, MuteState


def test_a_side_is_muted_until_its_last_reason_is_gone() -> None:
    state = MuteState()
    assert state.mute(MuteReason.THROTTLED) and state.mute(MuteReason.BACKPRESSURE)
    assert state.unmute(MuteReason.BACKPRESSURE)      # backpressure gone, throttle still on
    assert state.muted(Side.CLIENT) and MuteReason.THROTTLED in state
    assert state.unmute(MuteReason.THROTTLED)
    assert not state.muted(Side.CLIENT)


def test_mute_and_unmute_are_idempotent_and_say_when_they_change_something() -> None:
    state = MuteState()
    assert state.mute(MuteReason.THROTTLED) is True
    assert state.mute(MuteReason.THROTTLED) is False
    assert state.unmute(MuteReason.CONNECTING) is False   # never muted for this reason
    assert state.unmute(MuteReason.THROTTLED) is True
    assert state.unmute(MuteReason.THROTTLED) is False
    assert state.reasons == frozenset()


def test_a_slow_client_mutes_the_upstream_side_only() -> None:
    state = MuteState()
    state.mute(MuteReason.CLIENT_SLOW)
    assert state.muted(Side.UPSTREAM) and not state.muted(Side.CLIENT) and not state.blocks_requests


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(list(MuteReason))), max_size=60))
def test_any_sequence_mutes_each_side_exactly_while_one_of_its_reasons_is_held(
        ops: list[tuple[bool, MuteReason]]) -> None:
    state = MuteState()
    held: set[MuteReason] = set()
    for mute, reason in ops:
        changed = (state.mute if mute else state.unmute)(reason)
        assert changed == ((reason not in held) if mute else (reason in held))
        (held.add if mute else held.discard)(reason)
        assert state.reasons == frozenset(held)
        for side in Side:
            assert state.muted(side) == any(r.side is side for r in held)
        assert state.blocks_requests == bool(held & BLOCKING)
