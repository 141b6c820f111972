"""Connection limits (quotas.connection_limits): Kafka's ConnectionQuotas checks, on an explicit clock.

Arithmetic is in the comments. With Kafka's Rate over `window_count` windows, a fresh IP's rate is
measured over at least `window_count - 1` full windows, so with 11 x 1 s windows n connections at
t=0 read as n / 10 per second.
"""

from __future__ import annotations

import pytest

from kqp.quotas.connection_limits import (
    CREATION_RATE,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_IP,
    ConnectionLimits,
    LimitSettings,
)

A, B = "10.0.0.1", "10.0.0.2"


def admit_all(limits: ConnectionLimits, ip: str, n: int, now: float = 0.0) -> None:
    for i in range(n):
        assert limits.admit(ip, now) is None, f"connection {i + 1} from {ip} refused"


def test_no_limits_admit_everything_and_count_it() -> None:
    limits = ConnectionLimits(LimitSettings())
    admit_all(limits, A, 1000)
    assert limits.total == 1000 and limits.per_ip == {A: 1000}
    assert limits.tracked_ips == 0   # no rate limit: no rate kept


def test_max_connections_refuses_at_once_and_a_release_frees_a_slot() -> None:
    limits = ConnectionLimits(LimitSettings(max_connections=3))
    admit_all(limits, A, 2)
    admit_all(limits, B, 1)
    denied = limits.admit(B, 0.0)
    assert denied is not None and denied.reason == MAX_CONNECTIONS and denied.delay == 0.0
    assert limits.total == 3 and limits.per_ip == {A: 2, B: 1}   # nothing counted for a refusal
    limits.release(A)
    assert limits.admit(B, 0.0) is None
    assert limits.per_ip == {A: 1, B: 2}


def test_max_connections_per_ip_limits_each_ip_alone() -> None:
    limits = ConnectionLimits(LimitSettings(max_connections_per_ip=2))
    admit_all(limits, A, 2)
    denied = limits.admit(A, 0.0)
    assert denied is not None and denied.reason == MAX_CONNECTIONS_PER_IP and denied.delay == 0.0
    admit_all(limits, B, 2)   # another IP is not affected
    limits.release(A)
    limits.release(A)
    assert A not in limits.per_ip   # an IP with no connection left is not kept
    admit_all(limits, A, 2)


def test_creation_rate_delays_the_close_by_kafkas_throttle_and_unrecords_it() -> None:
    limits = ConnectionLimits(LimitSettings(connection_creation_rate_per_ip=5))
    # 50 at t=0 read 50 / 10 s = 5/s: at the bound, not over it.
    admit_all(limits, A, 50)
    # The 51st reads 51 / 10 = 5.1/s: throttle (5.1 - 5) / 5 * 10 s = 0.2 s.
    denied = limits.admit(A, 0.0)
    assert denied is not None and denied.reason == CREATION_RATE
    assert denied.delay == pytest.approx(0.2)
    # It was un-recorded, so the 52nd reads 5.1/s again, not 5.2/s.
    again = limits.admit(A, 0.0)
    assert again is not None and again.delay == pytest.approx(0.2)
    assert limits.total == 50
    admit_all(limits, B, 50)   # another IP has a rate of its own


def test_creation_rate_throttle_is_capped_at_one_window() -> None:
    limits = ConnectionLimits(LimitSettings(connection_creation_rate_per_ip=0.5, window_size_seconds=2,
                                            window_count=3))
    # Window 2 x (3 - 1) = 4 s. Two connections at t=0 read 2/4 = 0.5/s (at the bound); the
    # third reads 0.75/s: (0.75 - 0.5) / 0.5 * 4 = 2 s, the cap exactly; cap stays 2 s above it.
    admit_all(limits, A, 2)
    denied = limits.admit(A, 0.0)
    assert denied is not None and denied.delay == pytest.approx(2.0)
    for _ in range(5):   # un-recorded: still one over, still capped
        denied = limits.admit(A, 0.0)
        assert denied is not None and denied.delay <= 2.0


def test_creation_rate_recovers_as_time_passes() -> None:
    limits = ConnectionLimits(LimitSettings(connection_creation_rate_per_ip=5))
    admit_all(limits, A, 50)
    assert limits.admit(A, 0.0) is not None
    # At t=1 the span is still the 10 windows assumed for a young rate: 51/10 s, refused again.
    assert limits.admit(A, 1.0) is not None
    # At t=10.5 the oldest sample is 10.5 s old, the span is 10.5 s: 51/10.5 = 4.86/s, admitted.
    assert limits.admit(A, 10.5) is None


def test_per_ip_rates_are_forgotten_once_their_samples_expire() -> None:
    limits = ConnectionLimits(LimitSettings(connection_creation_rate_per_ip=100, window_count=3))
    for i in range(500):
        ip = f"10.1.{i // 250}.{i % 250}"
        assert limits.admit(ip, 0.0) is None
        limits.release(ip)
    assert limits.tracked_ips == 500
    # 3 windows of 1 s later every sample has expired: the next admission sweeps them all.
    assert limits.admit(A, 3.0) is None
    assert limits.tracked_ips == 1
    assert limits.per_ip == {A: 1}


def test_the_rate_is_checked_before_the_per_ip_count_as_kafka_does() -> None:
    limits = ConnectionLimits(LimitSettings(max_connections_per_ip=1, connection_creation_rate_per_ip=0.1))
    # 0.1/s over 10 s admits one connection at t=0; the second is over both limits: the rate speaks.
    assert limits.admit(A, 0.0) is None
    denied = limits.admit(A, 0.0)
    assert denied is not None and denied.reason == CREATION_RATE


def test_update_applies_new_limits_to_the_next_connection() -> None:
    limits = ConnectionLimits(LimitSettings(max_connections=1))
    admit_all(limits, A, 1)
    assert limits.admit(A, 0.0) is not None
    limits.update(LimitSettings(max_connections=2))
    assert limits.admit(A, 0.0) is None
    limits.update(LimitSettings(max_connections=1))   # lowered: open connections stay open
    assert limits.total == 2
    assert limits.admit(A, 0.0) is not None


def test_a_reload_that_lifts_the_creation_rate_drops_the_rates_held() -> None:
    limits = ConnectionLimits(LimitSettings(connection_creation_rate_per_ip=0.1))
    assert limits.admit(A, 0.0) is None   # 0.1/s over 10 s: A's one connection at t=0 fills it
    assert limits.admit(A, 0.0) is not None
    limits.update(LimitSettings())
    assert limits.tracked_ips == 0
    # Bound again: A starts afresh, its old connection no longer counts against it.
    limits.update(LimitSettings(connection_creation_rate_per_ip=0.1))
    assert limits.admit(A, 0.0) is None


def test_releasing_what_was_never_admitted_is_a_bug() -> None:
    limits = ConnectionLimits(LimitSettings())
    with pytest.raises(AssertionError):
        limits.release(A)
