"""The fetch sessions kqp vouches for: opened through it, by the principal, under the ACLs in force."""

from __future__ import annotations

from types import SimpleNamespace

from helpers.playbook import fetch_response

from kqp.protocol.fetch import fetch_session_id
from kqp.proxy.policies.authorization.fetch_sessions import FetchSessions

BODY = 4 + 4 + 1   # a v12 response's body: after its size, correlation id and the header's tagged fields


def fetch(session_id: int, epoch: int) -> SimpleNamespace:
    return SimpleNamespace(session_id=session_id, session_epoch=epoch)


def opened(sessions: FetchSessions, node: int | None, principal: str, session_id: int, generation: int = 0) -> None:
    assert sessions.admits(node, principal, fetch(0, 0), generation)
    frame = fetch_response(12, 1, records=1, session_id=session_id)
    sessions.watch(node, principal, 12, generation)([frame[:BODY + 3], frame[BODY + 3:]], BODY)


def test_a_session_is_vouched_for_its_principal_on_its_broker_under_its_acls() -> None:
    sessions = FetchSessions()
    opened(sessions, 1, "User:alice", 77)
    assert sessions.admits(1, "User:alice", fetch(77, 1), 0)
    assert not sessions.admits(1, "User:bob", fetch(77, 1), 0)      # another principal guessing the id
    assert not sessions.admits(2, "User:alice", fetch(77, 1), 0)    # another broker's session 77
    assert not sessions.admits(1, "User:alice", fetch(77, 2), 1)    # the ACLs took something away since
    assert not sessions.admits(1, "User:alice", fetch(78, 1), 0)


def test_a_full_fetch_closes_the_session_it_names_and_the_table_is_bounded() -> None:
    sessions = FetchSessions(limit=2)
    for session_id in (1, 2):
        opened(sessions, None, "User:alice", session_id)
    assert sessions.admits(None, "User:alice", fetch(1, 5), 0)      # 1 in use: 2 is the oldest now
    opened(sessions, None, "User:alice", 3)
    assert len(sessions) == 2 and not sessions.admits(None, "User:alice", fetch(2, 1), 0)
    assert sessions.admits(None, "User:alice", fetch(3, -1), 0)     # FINAL_EPOCH: sessionless, 3 closed
    assert not sessions.admits(None, "User:alice", fetch(3, 1), 0)
    opened(sessions, None, "User:alice", 0)                           # the broker opened none
    assert len(sessions) == 1


def test_the_session_id_is_read_from_a_response_in_parts_and_old_versions_have_none() -> None:
    frame = fetch_response(12, 1, records=1, session_id=123456)
    assert fetch_session_id(12, [frame[:BODY + 7], frame[BODY + 7:]], BODY) == 123456   # cut inside it
    assert fetch_session_id(6, [fetch_response(6, 1, records=1)], 8) == 0
