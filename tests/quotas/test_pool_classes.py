"""Service classes in a pool (pools/ledger.py, pools/pool_set.py): strict priority between classes, pre-emption
within the window, the way back when a class stops, cuts from the bottom, `max_share`, burst credit,
reloads, and the fleet.

Unless a test says otherwise: the issue's pool with a static budget B = 400 kB/s (the broker's C in
the issue's run), members `job-` by client id, class `latency` (`job-stream-`) above class `batch`
(`job-batch-`); windows of W = 0.2 s x 11 (a span is 2.2 s). The stream offers 100 kB/s (20 kB a
window), four batch jobs flat out (40 kB a window each, more than a quarter of what is left).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from helpers.pool_sim import Offer, simulate

from kqp.config import quota_settings_from
from kqp.quotas.manager import QuotaManager, combine
from kqp.quotas.model import Principal, QuotaKey, QuotaType
from kqp.quotas.pools.ledger import PoolLedger

B = 400_000.0
W = 0.2
PRODUCE = QuotaType.PRODUCER_BYTE_RATE
STREAM = Principal("ANONYMOUS", "job-stream-1")
BATCH = [Principal("ANONYMOUS", f"job-batch-{i}") for i in range(1, 5)]
CLASSES = [{"name": "latency", "members": [{"client_id_prefix": "job-stream-"}]},
           {"name": "batch", "members": [{"client_id_prefix": "job-batch-"}]}]


def section(classes: list[dict[str, Any]] | None = None, algorithm: str = "sampled", **pool: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"window_size_seconds": W, "algorithm": algorithm, "pools": [
        {"name": "ingest", "producer_byte_rate": B, "members": [{"client_id_prefix": "job-"}],
         "classes": copy.deepcopy(CLASSES if classes is None else classes), **pool}]}
    if not data["pools"][0]["classes"]:
        del data["pools"][0]["classes"]
    return data


def manager(data: dict[str, Any] | None = None) -> QuotaManager:
    return QuotaManager(quota_settings_from(data or section()), 0.0)


def ledger(m: QuotaManager) -> PoolLedger:
    return m.pools.ledgers[("ingest", PRODUCE)]


def key(p: Principal) -> QuotaKey:
    return QuotaKey(p.user, p.client_id)


def quota(m: QuotaManager, p: Principal) -> float:
    return ledger(m).members[key(p)].quota


def produce(m: QuotaManager, p: Principal, nbytes: float, now: float) -> float:
    return combine(m.record_produce(p, int(nbytes), 1, 1, now))[0]


def run_windows(m: QuotaManager, first: int, last: int, stream: bool = True, batch: bool = True) -> float:
    """Windows first..last-1: the stream's 20 kB and each batch job's 40 kB early in each; returns the
    stream's largest throttle."""
    worst = 0.0
    for window in range(first, last):
        now = window * W + 0.01
        if stream:
            worst = max(worst, produce(m, STREAM, 20_000, now))
        if batch:
            for p in BATCH:
                produce(m, p, 40_000, now)
    return worst


def test_the_stream_gets_what_it_offers_and_the_batch_jobs_share_the_rest() -> None:
    m = manager()
    assert run_windows(m, 0, 15) == 0   # the stream is never throttled
    pool = ledger(m)
    stream = pool.members[key(STREAM)]
    # the stream's demand is its 100 kB/s (20 kB a window); the batch jobs are held back: unbounded
    assert stream.demand == pytest.approx(100_000)
    assert stream.allocation == pytest.approx(100_000)
    # the batch jobs split the other 300k evenly: 75k each
    assert [quota(m, p) for p in BATCH] == pytest.approx([75_000] * 4)
    # the stream's fair share, what it could count on wanting more, is the whole budget: it is the
    # top class. It keeps it as its quota and lends the 300k it does not use.
    assert stream.fair == B and quota(m, STREAM) == B and pool.lent == pytest.approx(300_000)
    [state] = m.pools.snapshot(15 * W)
    latency, batch = state.classes
    assert (latency.name, latency.members, batch.name, batch.members) == ("latency", 1, "batch", 4)
    assert latency.allocation == pytest.approx(100_000) and batch.allocation == pytest.approx(300_000)
    assert batch.demand == float("inf") and latency.demand == pytest.approx(100_000)
    # what each class moved over the span's complete windows: 11 x 20 kB / 2.2 s, and every batch
    # job's 40 kB a window (the sampled rate lets them through: 4 x 40k / 0.2 = 800 kB/s offered)
    assert latency.delivered == pytest.approx(100_000)
    assert {m.service_class for m in state.members} == {"latency", "batch"}


def test_without_classes_the_stream_is_held_to_an_equal_share() -> None:
    # The complaint: one of five members, the stream gets B / 5 = 80k < the 100k it offers.
    m = manager(section([]))
    assert run_windows(m, 0, 15) > 0   # throttled
    assert ledger(m).members[key(STREAM)].demand == float("inf")
    assert quota(m, STREAM) == pytest.approx(80_000)


def test_a_stream_that_starts_cuts_the_batch_jobs_before_its_first_request_is_checked() -> None:
    m = manager()
    run_windows(m, 0, 10, stream=False)
    assert [quota(m, p) for p in BATCH] == pytest.approx([100_000] * 4)
    # The stream's first request, at 2.05 s: it joins wanting its whole share, the budget (top class);
    # the batch class falls to 0 at once, inside this window, before the request is checked.
    assert produce(m, STREAM, 20_000, 2.05) == 0
    assert [quota(m, p) for p in BATCH] == [0, 0, 0, 0]
    assert ledger(m).preemptions == {"latency": 0, "batch": 1}
    # A batch request now is throttled: a quota of 0 asks for the whole span, but the stream wants its
    # whole share only until it is measured (window 12, from 2.4 s): muted until then, 0.34 s
    assert produce(m, BATCH[0], 40_000, 2.06) == pytest.approx(0.34)
    # Two windows later the stream is measured (100k) and the batch jobs have the rest again.
    run_windows(m, 11, 14)
    assert [quota(m, p) for p in BATCH] == pytest.approx([75_000] * 4)
    assert quota(m, STREAM) == B


def test_a_trickle_from_the_class_above_pre_empts_nobody() -> None:
    # A stream sending 1 kB now and then: under 5% of its share's window (0.05 x 400k x 0.2 = 4 kB), so
    # not a class starting to offer. Joining, or back after a span of silence, it cuts nobody.
    m = manager()
    for window in range(30):
        run_windows(m, window, window + 1, stream=False)
        if window in (10, 12, 25):   # the last after a span of silence
            assert produce(m, STREAM, 1000, window * W + 0.05) == 0
            # the batch jobs keep all but what the stream is measured at (1000 B over two windows: 2.5k)
            assert min(quota(m, p) for p in BATCH) >= 99_000, window
    assert ledger(m).preemptions == {"latency": 0, "batch": 0}
    # 5 kB in a window is a stream starting: the batch class falls at once
    produce(m, STREAM, 5000, 30 * W + 0.05)
    assert [quota(m, p) for p in BATCH] == [0, 0, 0, 0] and ledger(m).preemptions["batch"] == 1


def test_a_stream_catching_up_after_a_stall_pre_empts_nobody_a_surge_does() -> None:
    m = manager()
    run_windows(m, 0, 15)
    # window 15: the stream stalls (nothing); window 16: it catches up, 40 kB, twice its 20 kB. Over the
    # two windows it sent what it always does: not a class offering more.
    run_windows(m, 15, 16, stream=False)
    for p in BATCH:
        produce(m, p, 40_000, 16 * W + 0.01)
    produce(m, STREAM, 40_000, 16 * W + 0.02)
    assert ledger(m).preemptions["batch"] == 0
    run_windows(m, 17, 20)
    # a surge: 20 kB, then 45 kB: three windows' worth in two, the batch class falls at once
    for p in BATCH:
        produce(m, p, 40_000, 20 * W + 0.01)
    produce(m, STREAM, 45_000, 20 * W + 0.02)
    assert ledger(m).preemptions["batch"] == 1
    assert [quota(m, p) for p in BATCH] == [0, 0, 0, 0]


def test_when_the_stream_stops_the_batch_jobs_get_its_share_back_within_three_windows() -> None:
    m = manager()
    run_windows(m, 0, 15)
    # The stream's last request was in window 14. Its demand is the larger of the last two windows'
    # use (at most its rate over the span): 100k in windows 15 and 16, 0 from window 17 (0.6 s after
    # its last request), when the batch jobs divide the whole budget.
    run_windows(m, 15, 17, stream=False)
    assert ledger(m).members[key(STREAM)].demand == pytest.approx(20_000 * 10 / 2.2)   # min(100k, span's)
    run_windows(m, 17, 18, stream=False)
    assert ledger(m).members[key(STREAM)].demand == 0
    assert [quota(m, p) for p in BATCH] == pytest.approx([100_000] * 4)


def test_a_member_no_class_names_is_in_the_lowest() -> None:
    m = manager()
    other = Principal("ANONYMOUS", "job-other-1")
    produce(m, other, 1000, 0.0)
    produce(m, STREAM, 1000, 0.0)
    assert ledger(m).members[key(other)].rank == 1
    [state] = m.pools.snapshot(0.1)
    assert {s.key.client_id: s.service_class for s in state.members} == {"job-other-1": "batch",
                                                                         "job-stream-1": "latency"}


def test_a_cut_budget_comes_out_of_the_lowest_class_first() -> None:
    # The adaptive law lowers the budget (PoolLedger.set_budget is its hook): 400k -> 200k -> 80k.
    m = manager()
    run_windows(m, 0, 15)
    m.pools.set_budget("ingest", PRODUCE, 200_000, 15 * W)
    assert ledger(m).members[key(STREAM)].allocation == pytest.approx(100_000)   # untouched
    assert [quota(m, p) for p in BATCH] == pytest.approx([25_000] * 4)          # (200k - 100k) / 4
    m.pools.set_budget("ingest", PRODUCE, 80_000, 15 * W)
    # the batch jobs are at their floor (0, no min_share): only now is the stream cut, to 80k
    assert [quota(m, p) for p in BATCH] == [0, 0, 0, 0]
    assert ledger(m).members[key(STREAM)].allocation == pytest.approx(80_000)


def test_a_batch_floor_is_kept_through_a_cut() -> None:
    # min_share 0.1 on job-batch-1's entity: 0.1 B set aside for it before any class is served.
    data = section()
    data["entities"] = [{"client_id": "job-batch-1", "min_share": 0.1}]
    m = manager(data)
    run_windows(m, 0, 15)
    m.pools.set_budget("ingest", PRODUCE, 100_000, 15 * W)
    # floor 10k for job-batch-1 (its member is the entity /clients/job-batch-1); the stream gets the
    # other 90k, the rest of the batch class nothing
    pool = ledger(m)
    assert pool.members[key(STREAM)].allocation == pytest.approx(90_000)
    assert pool.members[QuotaKey("", "job-batch-1")].quota == pytest.approx(10_000)
    assert [quota(m, p) for p in BATCH[1:]] == [0, 0, 0]


def test_max_share_caps_a_class_and_its_members_hold_their_share_of_it() -> None:
    classes = copy.deepcopy(CLASSES)
    classes[0]["max_share"] = 0.5
    m = manager(section(classes))
    stream2 = Principal("ANONYMOUS", "job-stream-2")
    for window in range(15):   # two streams flat out, 60 kB a window each: 300 kB/s offered each
        now = window * W + 0.01
        for p in (STREAM, stream2):
            produce(m, p, 60_000, now)
        for p in BATCH:
            produce(m, p, 40_000, now)
    # the latency class may take 0.5 B = 200k: 100k each; the batch jobs the other 200k, 50k each
    assert quota(m, STREAM) == pytest.approx(100_000) and quota(m, stream2) == pytest.approx(100_000)
    assert [quota(m, p) for p in BATCH] == pytest.approx([50_000] * 4)


# -- burst_seconds ---------------------------------------------------------------------------------
# A Spark micro-batch job in the latency class capped at max_share 0.25 (100k of B): 400 kB due every
# 4 s, i.e. 100 kB/s on average, sent as fast as kqp lets it; the batch jobs flat out beside it. Members
# measure with a token bucket, as an adaptive pool's do: its own burst is a span of quota (220 kB).

def micro_batches(burst_seconds: float | None, seconds: float = 30.0, algorithm: str = "token_bucket") -> Any:
    classes = copy.deepcopy(CLASSES)
    classes[0]["max_share"] = 0.25
    if burst_seconds is not None:
        classes[0]["burst_seconds"] = burst_seconds
    offers = [Offer("job-stream-1", start=4.0, every=4.0, batch_bytes=400_000),
              *[Offer(f"job-batch-{i}") for i in range(1, 5)]]
    return simulate(quota_settings_from(section(classes, algorithm)), offers, seconds)


EVERYONE = ["job-stream-1", *[f"job-batch-{i}" for i in range(1, 5)]]


def test_burst_credit_lets_a_micro_batch_go_at_once() -> None:
    # burst_seconds 4: a member saves up to 4 s of its 100k, the bucket's own 2.2 s and 1.8 s of credit.
    plain, burst = micro_batches(None), micro_batches(4.0)
    took = [sent - due for due, sent in burst.batches["job-stream-1"]]
    took_plain = [sent - due for due, sent in plain.batches["job-stream-1"]]
    # without credit: the bucket's 220 kB at once, the other 180 kB at 100 kB/s (measured 1.73 s each)
    assert min(took_plain) >= 1.5, took_plain
    # with it, from the third (the first two save it up): 25 requests of 16 kB, a round trip each
    # (measured 0.05 s)
    assert max(took[2:]) <= 0.2, took
    assert burst.rate("job-stream-1", 4.0, 28.0) == pytest.approx(100_000, rel=0.02)


def test_a_burst_is_repaid_by_the_classes_below_over_the_next_span() -> None:
    # What a burst class uses above its quota is taken back from the batch class over the window_count
    # - 1 windows after: the span that starts with each micro-batch holds no more than the budget's
    # worth (measured 0.90-1.05 B). Without burst_seconds the pool lends the quiet stream's share to
    # the batch jobs while the stream's bucket saves it too: 1.20 B in those spans, 1.10 B over the run.
    plain, burst = micro_batches(None), micro_batches(4.0)
    events = sorted(e for cid in EVERYONE for e in burst.events[cid])
    events_plain = sorted(e for cid in EVERYONE for e in plain.events[cid])
    dues = [due for due, _ in burst.batches["job-stream-1"]][1:]

    def span_from(evs: list[tuple[float, int]], at: float) -> float:
        return sum(n for t, n in evs if at <= t < at + 2.2) / 2.2 / B

    spans = [span_from(events, due) for due in dues]
    assert max(spans) <= 1.08, spans
    assert min(span_from(events_plain, due) for due in dues) >= 1.1
    assert burst.rate(EVERYONE, 6.0, 30.0) <= 1.02 * B


def test_credit_is_what_burst_seconds_adds_to_the_measurement() -> None:
    # The sampled rate already lets all but one window of a span through at once (2.0 s of quota):
    # burst_seconds 4 adds 2 s of credit.
    classes = copy.deepcopy(CLASSES)
    classes[0].update(max_share=0.25, burst_seconds=4)
    m = manager(section(classes))
    produce(m, STREAM, 1000, 0.0)
    run_windows(m, 1, 40, stream=False)   # the stream quiet for 8 s
    stream = ledger(m).members[key(STREAM)]
    # its quota is its fair share, 0.25 B = 100k; credit (4 - 2.0) s x 100k
    assert stream.quota == pytest.approx(100_000) and stream.credit == pytest.approx(200_000)
    # 400 kB at once: the sampled rate reads 400k over 2.0 s = 200 kB/s, over its 100k; the credit pays
    # 200 kB of it, and the rest is within the quota: no throttle
    assert produce(m, STREAM, 400_000, 8.01) == 0
    assert stream.spent == pytest.approx(200_000)
    # the next windows take it back from the batch class: 380 kB above its 20 kB allowance (100k x
    # 0.2 s) in window 40, over the 10 windows after: 38 kB a window, 190 kB/s off what the batch jobs
    # have besides the stream's share (back, and wanting it): 300k - 190k
    run_windows(m, 41, 42, stream=False)
    assert ledger(m).excess == pytest.approx(190_000)
    assert sum(quota(m, p) for p in BATCH) == pytest.approx(300_000 - 190_000)
    assert quota(m, STREAM) == pytest.approx(100_000)   # the stream keeps its share


# -- reloads and the fleet -------------------------------------------------------------------------

def test_a_reload_keeps_the_measurements_and_moves_members_between_classes() -> None:
    m = manager()
    run_windows(m, 0, 10)
    sensor = ledger(m).members[key(STREAM)].sensor
    # classes swapped: the batch jobs above the stream, the pre-emption counts kept by name
    lines = m.update_settings(quota_settings_from(section(list(reversed(CLASSES)))), 10 * W)
    assert lines == ["pool ingest: classes changed"], lines
    pool = ledger(m)
    assert pool.members[key(STREAM)].sensor is sensor and sensor.measure(10 * W) > 0
    assert pool.members[key(STREAM)].rank == 1 and pool.members[key(BATCH[0])].rank == 0
    run_windows(m, 10, 14)
    # the batch class flat out now takes the whole budget; the stream is held back
    assert [quota(m, p) for p in BATCH] == pytest.approx([100_000] * 4)
    assert pool.members[key(STREAM)].allocation == 0
    assert pool.preemptions["latency"] == 0 and "batch" in pool.preemptions


def test_two_instances_serve_the_classes_as_one() -> None:
    # cluster scope: the stream and two batch jobs on instance 0, two batch jobs on instance 1; each
    # instance divides the fleet's budget from the same totals, per class.
    settings = quota_settings_from(section(algorithm="token_bucket"))
    offers = [Offer("job-stream-1", 0, rate=100_000), Offer("job-batch-1", 0), Offer("job-batch-2", 0),
              Offer("job-batch-3", 1), Offer("job-batch-4", 1)]
    run = simulate(settings, offers, 25, sync_interval=0.1)
    stream = run.rate("job-stream-1", 5, 25)
    batch = [run.rate(f"job-batch-{i}", 5, 25) for i in range(1, 5)]
    # the stream gets what it offers; the batch jobs share the rest evenly, whichever instance serves them
    assert stream == pytest.approx(100_000, rel=0.03)
    assert sum(batch) == pytest.approx(300_000, rel=0.08), batch
    assert max(batch) / min(batch) <= 1.15, batch


