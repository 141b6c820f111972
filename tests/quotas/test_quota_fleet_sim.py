"""A simulated fleet (helpers.fleet_sim): many processes, one quota, the exchange every sync interval.

Pure and fast (no sockets, an injected clock), so it can afford what the end-to-end tests cannot:
ten processes, a minute of quota windows, an outage of the store in the middle. Each producer
offers without limit, in 16 KB requests, and is muted for the throttle it earns (KIP-219). Rates
are judged after three spans, once the first bursts have passed, as the end-to-end tests judge them.
"""

from __future__ import annotations

import pytest
from helpers.fleet_sim import random_stalls, rate, simulate, worst_span

Q = 150_000.0


def steady(run, end: float) -> float:  # type: ignore[no-untyped-def]
    return rate(run.events, 3 * run.span, end) / Q


def test_instance_scope_gives_each_process_the_quota() -> None:
    run = simulate(3, Q, 40, sync_interval=None)
    assert steady(run, 40) == pytest.approx(3.0, rel=0.05)


@pytest.mark.parametrize(("processes", "window_size"), [(3, 0.2), (3, 1.0), (10, 1.0)])
def test_cluster_scope_holds_the_fleet_to_one_quota(processes: int, window_size: float) -> None:
    seconds = 150 * window_size   # the sawtooth swings a span's rate by 10-15%: judge many spans
    run = simulate(processes, Q, seconds, sync_interval=0.1, window_size=window_size)
    assert steady(run, seconds) == pytest.approx(1.0, abs=0.1)
    # No span carries much more than the quota: Kafka's own sawtooth, plus what the fleet did not
    # know yet (a single process here reaches 1.14).
    assert worst_span(run.events, run.span, 3 * run.span, seconds) / Q < 1.5


def test_a_lone_user_of_a_shared_quota_gets_all_of_it() -> None:
    # One active process in a fleet of three that saw each other: the others use nothing, so none of
    # them is counted as using the quota, and the one client gets the whole quota.
    run = simulate(1, Q, 40, sync_interval=0.1)
    assert steady(run, 40) == pytest.approx(1.0, abs=0.05)


def test_during_an_outage_each_process_takes_its_share() -> None:
    run = simulate(3, Q, 40, sync_interval=0.1, down=(15, 25))
    assert rate(run.events, 5, 15) / Q == pytest.approx(1.0, abs=0.1)
    # Alone, each of the three processes it last counted enforces Q / 3: together, Q.
    assert rate(run.events, 15.5, 25) / Q == pytest.approx(1.0, abs=0.15)
    assert rate(run.events, 28, 40) / Q == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize(("processes", "window_size"), [(1, 0.2), (3, 0.2), (10, 1.0)])
def test_cluster_scope_token_bucket_holds_the_fleet_without_echo_bursts(processes: int, window_size: float) -> None:
    # Each process keeps a replica of the bucket, debited with the others' usage per exchange
    # (fleet/ledger.py): the fleet is held to Q, and no second carries more than ~1.3 Q (measured 1.09-1.31)
    # where the sampled rate's seconds reach 2-9 Q in the same runs.
    seconds = 150 * window_size
    run = simulate(processes, Q, seconds, sync_interval=0.1, window_size=window_size, algorithm="token_bucket")
    assert steady(run, seconds) == pytest.approx(1.0, abs=0.05)
    assert worst_span(run.events, 1.0, 3 * run.span, seconds) / Q < 1.6


def test_a_late_joiner_does_not_bring_its_own_first_burst() -> None:
    # Two processes hold the quota; at 20 s a client starts on the third. Before its process has
    # exchanged the sensor it counts the two others as using it as much as itself (fleet/ledger.py), and
    # is muted at most until that exchange: the span around the join carries 1.39 Q. Counting
    # nobody, the newcomer passed a whole first burst on top of the fleet's quota: 2.14 Q.
    run = simulate(3, Q, 40, sync_interval=0.1, starts=[0, 0, 20])
    assert worst_span(run.events, run.span, 20 - run.span, 20 + 2 * run.span) / Q < 1.6
    assert steady(run, 40) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("seed", range(4))
def test_a_starved_process_is_held_to_its_share(seed: int) -> None:
    # Each process's loop runs nothing for 1-3 s at a time, 30% of the time (a busy machine): its
    # clients wait, its exchanges and the replies on the wire wait too. A process whose view of
    # the fleet is older than 2 intervals + the timeout is held to its share, as when the store is
    # down: 0.98-1.02 Q, no span above 1.8 Q. Trusting the old view gave 1.06-1.07 Q, spans of 2.2 Q.
    run = simulate(3, Q, 60, sync_interval=0.1, stalls=random_stalls(3, 60, 2.0, 0.3, seed))
    assert steady(run, 60) == pytest.approx(1.0, abs=0.04)
    assert worst_span(run.events, run.span, 3 * run.span, 60) / Q < 2.0
