"""limits.max_in_flight_per_connection in the connection core: at the cap kqp stops reading the
client (a mute, as Kafka mutes a channel), it never closes it; one response later it reads on.

Only requests with a response count: an acks=0 Produce has none and never fills the cap.
"""

from __future__ import annotations

from helpers.playbook import connected_core, play, produce_frame, produce_response, to_client, to_upstream

from kqp.proxy.connection import events as ev
from kqp.proxy.connection.events import MuteReason, Side

NOW = 100.0


def frames(*correlation_ids: int, acks: int = 1) -> list[bytes]:
    return [produce_frame("t", 9, cid, "c", records=1, acks=acks) for cid in correlation_ids]


def test_at_the_cap_the_client_is_read_no_more_until_a_response_frees_a_place() -> None:
    core = connected_core(limits={"max_in_flight_per_connection": 2})
    one, two, three = frames(1, 2, 3)
    play(core, [
        # Three pipelined in one read: two go, the third waits unforwarded, reading stops.
        (ev.ClientData(NOW, one + two + three),
         [to_upstream(one), to_upstream(two), ev.Mute(MuteReason.IN_FLIGHT)]),
        # One answer frees a place: the waiting request goes, and the cap is reached again.
        (ev.UpstreamData(NOW, produce_response(9, 1)),
         [to_client(produce_response(9, 1)), ev.Unmute(MuteReason.IN_FLIGHT), to_upstream(three),
          ev.Mute(MuteReason.IN_FLIGHT)]),
        (ev.UpstreamData(NOW, produce_response(9, 2)),
         [to_client(produce_response(9, 2)), ev.Unmute(MuteReason.IN_FLIGHT)]),
        (ev.UpstreamData(NOW, produce_response(9, 3)), [to_client(produce_response(9, 3))]),
    ])
    assert not core.closed and not core.muted(Side.CLIENT)


def test_acks_zero_produce_never_fills_the_cap() -> None:
    core = connected_core(limits={"max_in_flight_per_connection": 1})
    batch = frames(1, 2, 3, acks=0)
    play(core, [(ev.ClientData(NOW, b"".join(batch)), [to_upstream(frame) for frame in batch])])
    assert not core.muted(Side.CLIENT)


def test_no_cap_pipelines_everything() -> None:
    core = connected_core(limits={"max_in_flight_per_connection": None})
    batch = frames(*range(1, 1501))
    play(core, [(ev.ClientData(NOW, b"".join(batch)), [to_upstream(frame) for frame in batch])])
    assert len(core.in_flight) == 1500
