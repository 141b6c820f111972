"""What a slow or odd client costs a connection: for `connections_max_idle_ms`, activity is a whole
request read or a response sent, never a byte of a frame still incomplete, so a client trickling a
frame a byte at a time (slowloris) is reaped like an idle one (the core compares `last_activity`
with the loop time of the process's `IdleCheck`); and a client naming a new client id in every
request keeps a bounded cache."""

from __future__ import annotations

from helpers.playbook import connected_core, play, produce_frame, produce_response, to_client, to_upstream

from kqp.proxy.connection import events as ev
from kqp.proxy.connection.authentication import MAX_CLIENT_IDS, MAX_SHARED_PRINCIPALS, Authentication, Principals
from kqp.proxy.connection.sasl import SaslPolicy
from kqp.quotas.model import ANONYMOUS, Principal

NOW = 100.0


def test_a_trickled_frame_is_not_activity_until_it_is_whole() -> None:
    core = connected_core(now=NOW)
    request = produce_frame("t", 7, 1, "c")
    for i, byte in enumerate(request[:-1]):   # one byte every 10 s
        play(core, [(ev.ClientData(NOW + 10 * (i + 1), byte.to_bytes(1, "big")), [])])
    assert core.last_activity == NOW   # idle since it connected, however many bytes trickled in
    done = NOW + 10 * len(request)
    play(core, [(ev.ClientData(done, request[-1:]), [to_upstream(request)])])
    assert core.last_activity == done


def test_a_trickling_client_is_closed_as_idle() -> None:
    """connections_max_idle_ms 60 s; a byte every 10 s, the process's IdleCheck after each: the
    7th check, 70 s after the client connected, finds it idle for more than 60 s."""
    core = connected_core(now=NOW, connections_max_idle_ms=60_000)
    request = produce_frame("t", 7, 1, "c")
    closed = []
    for i, byte in enumerate(request[:10]):
        now = NOW + 10 * (i + 1)
        core.handle(ev.ClientData(now, byte.to_bytes(1, "big")))
        closed += core.handle(ev.IdleCheck(now))
    assert closed == [ev.Close("idle", "idle for more than 60000 ms")]


def test_a_response_sent_is_activity() -> None:
    core = connected_core(now=NOW)
    request, response = produce_frame("t", 7, 1, "c"), produce_response(7, 1)
    play(core, [
        (ev.ClientData(NOW + 1, request), [to_upstream(request)]),
        (ev.UpstreamData(NOW + 30, response), [to_client(response)]),
    ])
    assert core.last_activity == NOW + 30


def test_a_client_cycling_client_ids_keeps_a_bounded_principal_cache() -> None:
    # Each request names a new client id; the connection's principal cache is cleared when full
    # instead of keeping one Principal per id ever seen.
    core = connected_core(now=NOW)
    for i in range(3 * MAX_CLIENT_IDS):
        request = produce_frame("t", 7, i, f"client-{i}")
        play(core, [(ev.ClientData(NOW, request), [to_upstream(request)]),
                    (ev.UpstreamData(NOW, produce_response(7, i)), [to_client(produce_response(7, i))])])
    assert len(core.auth.principals) <= MAX_CLIENT_IDS


def test_connections_on_one_table_share_one_principal_object_and_the_table_stays_bounded() -> None:
    shared = Principals()
    one, other = Authentication(SaslPolicy(), shared), Authentication(SaslPolicy(), shared)
    assert one.principal("c") is other.principal("c") == Principal(ANONYMOUS, "c")
    assert one.principal("d") is not one.principal("c")
    assert Authentication(SaslPolicy()).principal("c") is not one.principal("c")   # a table of its own
    first = shared.of("u", "x")
    for i in range(MAX_SHARED_PRINCIPALS):   # a fleet of client ids fills the table: it starts afresh
        shared.of("u", f"id-{i}")
    assert shared.of("u", "x") == first and shared.of("u", "x") is not first
