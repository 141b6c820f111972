"""The listeners' admission (proxy.runtime.admission): verdicts carried out, held sockets bounded.

Runs on a real event loop without sleeping: a refusal's throttle is a `call_later` that the tests
only count, and `close()` (shutdown) must end every held socket at once.
"""

from __future__ import annotations

import asyncio

from kqp.proxy.runtime.admission import MAX_HELD, Admission, peer_ip, peer_name
from kqp.proxy.tls.peers import Refusal
from kqp.quotas.connection_limits import ConnectionLimits, LimitSettings


def admission(settings: LimitSettings) -> tuple[Admission, list[tuple[str, str, Refusal]]]:
    refusals: list[tuple[str, str, Refusal]] = []
    return (Admission(asyncio.get_running_loop(), ConnectionLimits(settings),
                      lambda listener, peer, why: refusals.append((listener, peer, why))), refusals)


async def test_an_admitted_connection_holds_one_place_until_its_slot_is_released_once() -> None:
    door, refusals = admission(LimitSettings(max_connections_per_ip=1))
    closed: list[int] = []
    slot = door.admit("bootstrap", ("10.0.0.1", 5000), lambda: closed.append(1))
    assert slot is not None and closed == [] and refusals == []
    assert door.admit("bootstrap", ("10.0.0.1", 5001), lambda: closed.append(2)) is None
    assert closed == [2]   # over the per-IP count: closed at once
    assert refusals[0][:2] == ("bootstrap", "10.0.0.1:5001") and refusals[0][2].reason == "max_connections_per_ip"
    slot.release()
    slot.release()   # idempotent: the TLS listener and the edge may both hold it
    assert door.limits.total == 0
    assert door.admit("bootstrap", ("10.0.0.1", 5002), lambda: None) is not None


async def test_sockets_held_for_a_throttle_are_capped_and_closed_at_shutdown() -> None:
    # 0.1/s over 10 s windows admits one connection; every later one is throttled.
    door, refusals = admission(LimitSettings(connection_creation_rate_per_ip=0.1))
    closed: list[int] = []
    assert door.admit("bootstrap", ("10.0.0.1", 1), lambda: None) is not None
    for i in range(MAX_HELD + 5):
        assert door.admit("bootstrap", ("10.0.0.1", 2 + i), lambda i=i: closed.append(i)) is None
    assert door.held == MAX_HELD
    assert closed == list(range(MAX_HELD, MAX_HELD + 5))   # past the cap: closed at once
    assert {why.reason for _, _, why in refusals} == {"connection_creation_rate"}
    door.close()
    assert door.held == 0 and sorted(closed) == list(range(MAX_HELD + 5))


def test_limits_are_kept_per_ip_whatever_the_address_family() -> None:
    assert peer_ip(("::ffff:10.0.0.1", 5000, 0, 0)) == "10.0.0.1"
    assert peer_ip(("10.0.0.1", 5000)) == "10.0.0.1"
    assert peer_ip(("fe80::1%eth0", 5000, 0, 2)) == "fe80::1"
    assert peer_ip("/run/kqp.sock") == "/run/kqp.sock"


def test_a_peer_is_shown_as_host_and_port_whatever_the_address_family() -> None:
    # The one formatter the edge, the TLS listeners and admission share.
    assert peer_name(("10.0.0.1", 5000)) == "10.0.0.1:5000"
    assert peer_name(("fe80::1%eth0", 5000, 0, 2)) == "fe80::1%eth0:5000"
    assert peer_name("/run/kqp.sock") == "/run/kqp.sock"
