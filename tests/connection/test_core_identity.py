"""Who the client is: the user the edge hands over with ClientConnected names every quota entity.

Quota arithmetic as in test_core_throttling: windows of 1 s x 11, producer_byte_rate 1000 B/s for
the user alice, so one ~30 KB Produce frame from a fresh sensor reads as ~3 KB/s and is over quota;
bob, with no quota of his own, is not throttled by the same bytes.
"""

from __future__ import annotations

import pytest
from helpers.playbook import connected as upstream_up
from helpers.playbook import connecting, make_core, play, produce_frame, to_upstream

from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import MuteReason
from kqp.quotas.model import ANONYMOUS, Principal

NOW = 100.0
ALICE_QUOTA = {"window_size_seconds": 1, "window_count": 11,
               "entities": [{"user": "alice", "producer_byte_rate": 1000}]}


def connected(user: str | None) -> Connection:
    core = make_core(ALICE_QUOTA)
    play(core, [connecting(NOW, user), upstream_up(NOW)])
    return core


def test_the_user_from_the_edge_is_the_connection_s_user() -> None:
    assert connected("alice").user == "alice"
    assert connected(None).user == ANONYMOUS


def test_a_user_quota_throttles_that_user() -> None:
    core = connected("alice")
    frame = produce_frame("t", 7, 1, "any-client")
    x = (len(frame) - 4) / 1000 - 10    # seconds: (S / 10 - 1000) / 1000 x 10, S without the size prefix
    play(core, [(ev.ClientData(NOW, frame),
                 [to_upstream(frame), ev.Mute(MuteReason.THROTTLED), ev.SetTimer(pytest.approx(NOW + x))])])
    assert core.in_flight[0].principal == Principal("alice", "any-client")


@pytest.mark.parametrize("user", ["bob", None])
def test_another_user_is_not_throttled_by_alice_s_quota(user: str | None) -> None:
    core = connected(user)
    frame = produce_frame("t", 7, 1, "any-client")
    play(core, [(ev.ClientData(NOW, frame), [to_upstream(frame)])])
    assert core.in_flight[0].principal == Principal(user or ANONYMOUS, "any-client")
