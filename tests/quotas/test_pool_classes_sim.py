"""Service classes on a saturated broker, simulated (helpers/classes_sim.py): the issue's run without
sockets, through kqp's own quota manager, adaptive pool and classes.

The issue's run: an adaptive pool (ceiling 10 MB/s, target 100 ms, 0.2 s windows) on a broker that
takes C = 400 kB/s, four batch jobs flat out in 16 kB requests and a stream offering a steady
100 kB/s in 1 kB records (linger 5 ms) from 2 s to 15 s; without and then with the issue's classes
(`latency` for job-stream-, `batch` for job-batch-, no max_share or burst_seconds). Judged over
5-15 s, after the new pool's slow start. Failure messages carry the figures.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

from helpers.classes_sim import Run, Scenario, simulate

C = 400_000.0
BATCH = ["job-batch-1", "job-batch-2", "job-batch-3", "job-batch-4"]
MEASURED = (5.0, 15.0)
STOP = 15.0
CLASSES = [{"name": "latency", "members": [{"client_id_prefix": "job-stream-"}]},
           {"name": "batch", "members": [{"client_id_prefix": "job-batch-"}]}]


def quotas(classes: bool) -> dict[str, Any]:
    pool: dict[str, Any] = {"name": "ingest", "producer_byte_rate": 10_000_000,
                            "members": [{"client_id_prefix": "job-"}], "adaptive": {"target_latency_ms": 100}}
    if classes:
        pool["classes"] = CLASSES
    return {"window_size_seconds": 0.2, "pools": [pool]}


BASE = Scenario(quotas(False), seconds=25.0, stream_start=2.0, stream_stop=STOP)


@cache
def without() -> Run:
    return simulate(BASE)


@cache
def with_classes() -> Run:
    return simulate(replace(BASE, quotas=quotas(True)))


def figures(run: Run) -> str:
    batch = run.rate(BATCH, *MEASURED)
    return (f"stream {run.rate('job-stream-1', *MEASURED) / run.offered_rate(*MEASURED):.3f} of its offer, p99 "
            f"{run.p99(*MEASURED):.3f} s; batch {batch / C:.3f} C, split "
            f"{[round(run.rate(b, *MEASURED) / batch, 3) for b in BATCH]}")


def test_without_classes_the_stream_is_held_to_an_equal_share() -> None:
    # The complaint, reproduced: one member of five, the stream gets about B / 5 < 100 kB/s
    # and its records queue in its client (measured 0.50 of its offer, p99 11.5 s).
    run = without()
    assert run.rate("job-stream-1", *MEASURED) <= 0.9 * run.offered_rate(*MEASURED), figures(run)
    assert run.p99(*MEASURED) > 2.0, figures(run)


def test_with_classes_the_stream_keeps_its_latency_and_the_batch_jobs_share_the_rest() -> None:
    run, base = with_classes(), without()
    # the stream: at least 95% of what it offers (measured 1.00), p99 at most 0.5 s and 0.3x the run
    # without classes (measured 0.19 s)
    assert run.rate("job-stream-1", *MEASURED) >= 0.95 * run.offered_rate(*MEASURED), figures(run)
    assert run.p99(*MEASURED) <= 0.5 and run.p99(*MEASURED) <= 0.3 * base.p99(*MEASURED), figures(run)
    # the batch jobs: at least 0.45 C (measured 0.73), each 0.25 +- 0.07 of their total (0.247-0.253)
    batch = run.rate(BATCH, *MEASURED)
    assert batch >= 0.45 * C, figures(run)
    assert all(abs(run.rate(b, *MEASURED) / batch - 0.25) <= 0.07 for b in BATCH), figures(run)


def test_once_the_stream_stops_the_batch_jobs_take_the_capacity_within_5_s() -> None:
    run = with_classes()
    # the first second after the stream's last record in which the batch jobs move 0.7 C (measured:
    # the first, 15-16 s), and they keep it (measured 0.96 C over 16-25 s)
    back = next((t for t in (STOP + 0.2 * k for k in range(21)) if run.rate(BATCH, t, t + 1.0) >= 0.7 * C), None)
    assert back is not None and back + 1.0 - STOP <= 5.0, figures(run)
    assert run.rate(BATCH, 16.0, 25.0) >= 0.8 * C


def test_a_stream_starting_into_a_saturated_pool_cuts_the_batch_jobs_at_once() -> None:
    # The stream starts at 8 s, the batch jobs having had the whole budget for 6 s: its first request
    # pre-empts the batch class (their allocations fall before the request is checked), and its
    # records are not queued behind a batch backlog: its first second's p99 is the FIFO's (measured
    # 0.13 s; the batch class 0 in the windows at 8.0 and 8.2 s, 340 kB/s from 8.4 s).
    run = simulate(replace(BASE, quotas=quotas(True), stream_start=8.0, seconds=14.0, stream_stop=14.0))
    assert run.p99(8.0, 9.0) <= 0.5, run.p99(8.0, 9.0)
    pool = run.manager.pools.ledgers[("ingest", "producer_byte_rate")]   # type: ignore[union-attr]
    assert pool.preemptions["batch"] >= 1
    batch_class = [(at, alloc[1]) for at, _, alloc in run.trace]
    before = [a for at, a in batch_class if 7.0 <= at < 8.0]
    just_after = [a for at, a in batch_class if 8.0 < at <= 8.4]
    assert min(before) > 0.5 * C and min(just_after) <= 0.01 * C, (before, just_after)
    assert run.rate("job-stream-1", 9.0, 14.0) >= 0.95 * run.offered_rate(9.0, 14.0)


def test_when_the_broker_slows_the_batch_class_is_cut_first() -> None:
    # C falls from 400 to 200 kB/s at 10 s, to 80 kB/s at 20 s. The adaptive budget follows it down;
    # the stream keeps its 100 kB/s while the batch jobs are cut, and only below 100 kB/s is it cut
    # (measured: 13-20 s the stream 1.00 of its offer, p99 0.33 s, the batch jobs 40 kB/s; 23-30 s
    # the batch jobs 4.7 kB/s, the stream 75 kB/s).
    run = simulate(replace(BASE, quotas=quotas(True), seconds=30.0, stream_stop=30.0,
                           capacity_changes=((10.0, 200_000.0), (20.0, 80_000.0))))
    stream, offered = run.rate("job-stream-1", 13.0, 20.0), run.offered_rate(13.0, 20.0)
    assert stream >= 0.95 * offered and run.p99(13.0, 20.0) <= 0.5, (stream, run.p99(13.0, 20.0))
    assert run.rate(BATCH, 13.0, 20.0) <= 0.6 * 200_000
    # at 80 kB/s the batch jobs get (almost) nothing and the stream what the broker takes
    assert run.rate(BATCH, 23.0, 30.0) <= 0.1 * 80_000, run.rate(BATCH, 23.0, 30.0)
    assert run.rate("job-stream-1", 23.0, 30.0) >= 0.85 * 80_000, run.rate("job-stream-1", 23.0, 30.0)
