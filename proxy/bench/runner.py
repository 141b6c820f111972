"""Runs every workload through every reference, round after round, and records what it measured.

A round runs each reference once (in a shuffled order, so no reference always goes first on a cold
machine, last on a hot one, or right after the same neighbour); a reference's cell is a fresh
broker plus the proxy under test, and the workloads run in it one after another: batched produce,
consume, paced latency, distinct entities (kqp only), then the idle-connections hold (last,
because it leaves a thousand closed connections behind it).

Clients run in a pool of spawned processes; the harness itself only starts servers, reads /proc
for the proxy's CPU and memory around each workload, and writes down one measurement per
(round, reference, workload). A workload that fails is recorded with its error and the run goes on;
a proxy that never starts is reported unavailable with the reason.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import signal
import subprocess
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.pool import Pool
from pathlib import Path
from typing import Any

from . import busy_clients, churn_clients, idle_clients, proc_stats, spark_like, workloads
from .processes import StartError
from .references import BROKER, Cell, CellSettings, Reference, open_cell

TOPICS = {"bench-produce": 3, "bench-consume": 3, "bench-latency": 1, "bench-busy": 3, "bench-spark": 8,
          "bench-light": 1, "bench-classes": 1, "bench-churn": 1}
# The Spark-like load: 16 executors' producers (two client processes of 8), then 4 readers in one
# group (two client processes of 2 threads).
SPARK_PRODUCERS, SPARK_READERS, CLIENT_PROCESSES = 16, 4, 2
# Spark's Kafka source: each of the 8 partitions read as 2 offset ranges, a task each, 4 at a time per process.
SPARK_SPLITS, SPARK_TASKS = 2, 4
CHURN_PARALLEL = 4   # churn: connections open at once
LIGHT_RATE = 200.0   # records a second, the light-load workload
# The Java producer's defaults (librdkafka's in-flight limit is 1000000, its batches 1 MB here):
# small requests, 5 in flight per connection, where pipelining matters and kqp's one request at a
# time for a request quota (`response_pending`) shows (`produce-inflight5`).
JAVA_PRODUCER = {"max.in.flight.requests.per.connection": 5, "batch.size": 16_384}
# What `kqp bench --profile` can run under py-spy (spark: both halves; spark-assign: the reads only).
PROFILED = ("produce", "consume", "spark", "spark-assign", "churn")
WORKLOADS = {
    "produce": "batched produce, 1 KB records, librdkafka producer (linger 5 ms, acks=1)",
    "consume": "librdkafka consumer reading seeded 1 KB records from the start of 3 partitions",
    "latency": "one 100-byte acks=1 produce at a time, paced at the target rate; round-trip times",
    "connections": "many concurrent raw connections: ApiVersions, then Metadata every second",
    "produce-parallel": "two batched producers in two client processes (workers scaling)",
    "produce-inflight5": "produce with the Java producer's defaults: 16 KB batches, 5 requests in flight",
    "entities": "one Metadata request from each of many distinct client ids: proxy memory per entity",
    "busy": "many connections each producing (acks=1) and fetching it back once a second, every answer checked",
    "spark-produce": "16 producers with distinct client ids: 1 KB keyed records, 16 KiB batches, linger 5 ms, "
                     "acks=all, 8 partitions",
    "spark-consume": "4 consumers in one group read back everything spark-produce wrote; every acknowledged "
                     "record must be read exactly once",
    "spark-assign": "Spark's Kafka source over what spark-produce wrote: 16 offset ranges, a task each, 4 at a "
                    "time per client process, each a consumer with a new client id assign()ed its range",
    "churn": "connections one after another, 4 at a time: ApiVersions, one Produce (acks=1), close; a new client "
             "id each: the proxy's CPU per connection",
    "churn-repeat": "churn with one client id for every connection",
    "light": "about 200 records/s of 1 KB (linger 0, acks=all), sent without waiting; per-record latency",
    "idle": "10,000 connections held open after one ApiVersions and Metadata each: memory per idle connection",
    "classes": "a stream at 100 kB/s and four batch producers flat out in one adaptive pool on a broker saturated "
               "at 400 kB/s: the stream's delivery and latency, the batch jobs' share and split",
}


@dataclass(frozen=True)
class Plan:
    """Sizes of every workload; `short` and `long` presets live in the CLI."""

    rounds: int
    produce_seconds: float
    consume_megabytes: float
    latency_seconds: float
    latency_rate: float
    connections: int
    hold_seconds: float
    throttle_bytes_s: float
    entities: int = 10_000
    busy_seconds: float = 0.0    # the busy workload's length (`kqp bench --busy SECONDS`; 0: not run)
    idle_connections: int = 10_000   # the idle workload's connections
    classes_seconds: float = 20.0   # the classes workload: the stream stops 6 s before the end


class Runner:
    def __init__(self, plan: Plan, cell_settings: CellSettings, log: Callable[[str], None],
                 py_spy: str | None = None) -> None:
        self.plan = plan
        self.py_spy = py_spy
        self.cell_settings = cell_settings
        self.log = log
        self.measurements: list[dict[str, Any]] = []
        self.unavailable: dict[str, str] = {}  # reference -> why it is not run at all
        self.start_failures: dict[str, str] = {}  # reference -> why its proxy last failed to start
        self._pool: Pool | None = None
        self._profile_to: Path | None = None   # set while `profile` runs a workload under py-spy
        # id(cell) -> the ids spark-produce had acknowledged there, the positions it acknowledged them at,
        # and each partition's end after them
        self._acked: dict[int, tuple[bytes, bytes, dict[int, int]]] = {}

    # -- client processes ------------------------------------------------------------------
    def _clients(self) -> Pool:
        if self._pool is None:
            self._pool = multiprocessing.get_context("spawn").Pool(2)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def _call(self, func: Callable[..., dict[str, Any]], *args: Any, timeout: float,
              watch: Callable[[], None] | None = None, copies: int = 1) -> list[dict[str, Any]]:
        """Run `func(*args)` in `copies` client processes at once; `watch` is polled meanwhile."""
        return self._run_jobs([(func, *args)] * copies, timeout, watch)

    def _run_jobs(self, jobs: list[tuple[Any, ...]], timeout: float,
                  watch: Callable[[], None] | None = None) -> list[dict[str, Any]]:
        """Run each `(func, *args)` in a client process, all at once; their results in order."""
        pending = [self._clients().apply_async(job[0], job[1:]) for job in jobs]
        deadline = time.monotonic() + timeout
        try:
            while not all(job.ready() for job in pending):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{jobs[0][0].__name__} still running after {timeout:.0f}s")
                if watch is not None:
                    watch()
                time.sleep(0.05)
            return [job.get() for job in pending]
        except TimeoutError:
            self.close()  # a stuck client process would hold the next workload hostage
            raise

    # -- one cell ----------------------------------------------------------------------------
    def run_cell(self, round_no: int, ref: Reference, workload_names: list[str]) -> None:
        tag = f"r{round_no}-{ref.name}"
        started = time.monotonic()
        try:
            with open_cell(ref, self.cell_settings, tag) as cell:
                try:
                    self._prepare(cell, seed="consume" in workload_names)   # seeding 250 MB takes a while
                except Exception as exc:
                    for name in workload_names:
                        self._record(round_no, ref, name, error=f"preparing the broker: {exc!r}")
                    return
                for name in workload_names:
                    if cell.proxy is not None and not cell.proxy.alive():
                        self._record(round_no, ref, name, error=f"proxy exited: {cell.proxy.log_tail()}")
                        continue
                    try:
                        metrics = getattr(self, "_" + name.replace("-", "_"))(cell, round_no)
                        self._record(round_no, ref, name, metrics=metrics)
                    except Exception as exc:
                        self._record(round_no, ref, name, error=f"{type(exc).__name__}: {exc}")
                self._acked.pop(id(cell), None)
        except StartError as exc:
            if exc.server != BROKER:
                # Tried again next round (kqp under development may be broken for a moment);
                # a reference that never starts is reported unavailable with this reason.
                self.start_failures[ref.name] = str(exc)
            for name in workload_names:
                self._record(round_no, ref, name, error=f"start failed: {exc}")
        self.log(f"  {ref.name:14} cell took {time.monotonic() - started:.1f}s")

    def status(self, name: str) -> tuple[str, str | None]:
        """("ok", None), or ("unavailable", reason) for a reference that measured nothing."""
        reason = self.unavailable.get(name)
        if reason is None and not any(entry["reference"] == name and "metrics" in entry
                                      for entry in self.measurements):
            reason = self.start_failures.get(name, "no workload completed")
        return ("unavailable", reason) if reason else ("ok", None)

    def _record(self, round_no: int, ref: Reference, workload: str, *,
                metrics: dict[str, Any] | None = None, error: str | None = None) -> None:
        entry: dict[str, Any] = {"round": round_no, "reference": ref.name, "workload": workload}
        if error is not None:
            entry["error"] = error
            self.log(f"  {ref.name:14} {workload:16} ERROR {error[:160]}")
        else:
            entry["metrics"] = metrics
            self.log(f"  {ref.name:14} {workload:16} {_brief(metrics or {})}")
        self.measurements.append(entry)

    def _prepare(self, cell: Cell, seed: bool = True) -> None:
        # Topics and the consume workload's data go in through the broker itself (not the proxy),
        # before any measurement starts.
        self._call(workloads.create_topics, cell.upstream, TOPICS, 10.0, cell.upstream_conf, timeout=60)
        if seed:
            self._call(workloads.seed, cell.upstream, "bench-consume", self.plan.consume_megabytes, 1024,
                       cell.upstream_conf, timeout=120)

    def _measured(self, cell: Cell, func: Callable[..., dict[str, Any]], *args: Any,
                  timeout: float, copies: int = 1) -> dict[str, Any]:
        """Run a throughput workload; add the proxy's CPU seconds per GB moved meanwhile."""
        results, cpu = self._sampled(cell, [(func, *args)] * copies, timeout)
        metrics = _combine(results)
        metrics.update(_cpu_per_gb(cpu, metrics["bytes_moved"], results))
        return metrics

    def _sampled(self, cell: Cell, jobs: list[tuple[Any, ...]],
                 timeout: float) -> tuple[list[dict[str, Any]], ProxyCpu | None]:
        """Run `jobs` at once (`_run_jobs`); their results and the proxy's CPU meanwhile, traced so
        that it can also be read over the span the jobs moved data in (None without a proxy)."""
        pid = cell.proxy.pid if cell.proxy is not None else None
        before = proc_stats.sample(pid) if pid is not None else None
        profiler = self._start_profiler(pid, self._profile_to) if self._profile_to is not None else None
        trace = proc_stats.CpuTrace(pid) if pid is not None else None
        try:
            with trace if trace is not None else contextlib.nullcontext():
                results = self._run_jobs(jobs, timeout)
        finally:
            if profiler is not None:   # stopped with the workload, however long it took: it writes then
                profiler.send_signal(signal.SIGINT)
                profiler.wait(60)
        after = proc_stats.sample(pid) if pid is not None else None
        if before is None or after is None:
            return results, None
        return results, ProxyCpu(after.cpu_seconds - before.cpu_seconds, trace)

    def profile(self, ref: Reference, out: Path, workload: str = "produce") -> dict[str, Any] | None:
        """One extra run of `workload` (one of `PROFILED`) with `ref` under py-spy, outside the
        measured rounds.

        Sampling with native frames (uvloop is C, and its time would otherwise show up as one
        opaque Python frame) pauses the process at every sample, so this run's figures are kept
        apart from the medians.
        """
        if workload not in PROFILED:
            raise ValueError(f"cannot profile {workload!r}: one of {', '.join(PROFILED)}")
        with open_cell(ref, self.cell_settings, f"profile-{ref.name}-{workload}") as cell:
            self._prepare(cell, seed=workload == "consume")
            self._profile_to = out
            try:
                if workload == "spark":   # both halves into one profile: py-spy appends to nothing, so two files
                    self._profile_to = out.with_name(out.stem + "-produce" + out.suffix)
                    self._spark_produce(cell, -1)
                    self._profile_to = out
                    metrics = self._spark_consume(cell, -1)
                elif workload == "spark-assign":   # it reads what spark-produce wrote, unprofiled
                    self._profile_to = None
                    self._spark_produce(cell, -1)
                    self._profile_to = out
                    metrics = self._spark_assign(cell, -1)
                else:
                    metrics = getattr(self, "_" + workload)(cell, -1)
            finally:
                self._profile_to = None
                self._acked.pop(id(cell), None)
        self.log(f"  {ref.name:14} {workload + ' (py-spy)':16} {_brief(metrics)}")
        return metrics

    def _start_profiler(self, pid: int | None, out: Path) -> subprocess.Popen[bytes] | None:
        if self.py_spy is None or pid is None:
            return None
        argv = [self.py_spy, "record", "--pid", str(pid), "--rate", "200", "--format", "raw", "--native",
                "-o", str(out)]
        with open(self.cell_settings.workdir / "py-spy.log", "wb") as log:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    # -- workloads ---------------------------------------------------------------------------
    def _produce(self, cell: Cell, _round: int) -> dict[str, Any]:
        plan = self.plan
        return self._measured(cell, workloads.produce, cell.bootstrap, "bench-produce",
                              plan.produce_seconds, 1024, "kqp-bench-produce", 15.0, cell.client_conf,
                              timeout=plan.produce_seconds + 60)

    def _produce_inflight5(self, cell: Cell, _round: int) -> dict[str, Any]:
        plan = self.plan
        conf = {**cell.client_conf, **JAVA_PRODUCER}
        return self._measured(cell, workloads.produce, cell.bootstrap, "bench-produce",
                              plan.produce_seconds, 1024, "kqp-bench-produce", 15.0, conf,
                              timeout=plan.produce_seconds + 60)

    def _produce_parallel(self, cell: Cell, _round: int) -> dict[str, Any]:
        plan = self.plan
        return self._measured(cell, workloads.produce, cell.bootstrap, "bench-produce",
                              plan.produce_seconds, timeout=plan.produce_seconds + 60, copies=2)

    def _consume(self, cell: Cell, _round: int) -> dict[str, Any]:
        records = int(self.plan.consume_megabytes * 1e6 / 1024)
        seconds = max(self.plan.produce_seconds, 3.0)
        return self._measured(cell, workloads.consume, cell.bootstrap, "bench-consume",
                              TOPICS["bench-consume"], records, seconds, 60.0, "kqp-bench-consume",
                              cell.client_conf, timeout=seconds + 120)

    def _spark_produce(self, cell: Cell, _round: int) -> dict[str, Any]:
        each = SPARK_PRODUCERS // CLIENT_PROCESSES
        jobs = [(spark_like.spark_produce, cell.bootstrap, "bench-spark", n * each, each, self.plan.produce_seconds,
                 1024, 20.0, cell.client_conf) for n in range(CLIENT_PROCESSES)]
        results, cpu = self._sampled(cell, jobs, timeout=self.plan.produce_seconds + 90)
        ends: dict[int, int] = {}
        for result in results:
            ends = spark_like.reading_ends(ends, result.pop("acked_ends"))
        self._acked[id(cell)] = (b"".join(result.pop("acked") for result in results),
                                 b"".join(result.pop("acked_at") for result in results), ends)
        metrics = _combine(results)
        metrics.update(_cpu_per_gb(cpu, metrics["bytes_moved"], results))
        return metrics

    def _produced(self, cell: Cell, workload: str) -> tuple[array[int], array[int], dict[int, int]]:
        """What spark-produce had acknowledged in this cell (ids, their positions) and where reading ends."""
        produced = self._acked.get(id(cell))
        if produced is None:
            raise RuntimeError(f"{workload} reads what spark-produce wrote in the same cell: run both")
        acked_ids, acked_at, acked_ends = produced
        (ends,) = self._call(spark_like.end_offsets, cell.upstream, "bench-spark", TOPICS["bench-spark"],
                             cell.upstream_conf, timeout=60)
        # Up to what was acknowledged, not only to what ListOffsets answers: twice under the full
        # suite's load, the 15 acknowledged records of one batch went unread, the group done short of them.
        return array("Q", acked_ids), array("Q", acked_at), spark_like.reading_ends(ends, acked_ends)

    def _spark_consume(self, cell: Cell, _round: int) -> dict[str, Any]:
        acked, acked_at, ends = self._produced(cell, "spark-consume")
        self._call(spark_like.start_group, cell.upstream, "bench-spark", "spark-readers", TOPICS["bench-spark"],
                   cell.upstream_conf, timeout=60)
        each = SPARK_READERS // CLIENT_PROCESSES
        timeout = 120 + self.plan.produce_seconds * 4
        jobs = [(spark_like.spark_consume, cell.bootstrap, "bench-spark", "spark-readers", ends, n * each, each,
                 timeout, cell.client_conf) for n in range(CLIENT_PROCESSES)]
        results, cpu = self._sampled(cell, jobs, timeout=timeout + 30)
        positions, ids, taken, redelivered, seconds, moved = _reads(results)
        metrics = {"seconds": seconds, "records": len(taken), "mb_s": moved / max(seconds, 1e-9) / 1e6,
                   "records_s": len(taken) / max(seconds, 1e-9), "bytes_moved": moved,
                   "errors": sum(r["errors"] for r in results), "rebalances": sum(r["rebalances"] for r in results),
                   "redelivered": redelivered, **exactly_once(acked, taken)}
        if metrics["lost"]:
            metrics.update(self._lost(cell, acked, acked_at, positions, ids, taken))
        metrics.update(_cpu_per_gb(cpu, moved, results))
        return metrics

    def _spark_assign(self, cell: Cell, round_no: int) -> dict[str, Any]:
        """Spark's Kafka source over what spark-produce wrote: a task per offset range, each a consumer of
        its own with a new client id, `assign()`ed; over the whole run, its set-up included."""
        acked, acked_at, ends = self._produced(cell, "spark-assign")
        ranges = spark_like.offset_ranges(ends, SPARK_SPLITS)
        query = f"q{round_no}-{random.getrandbits(32):08x}"
        timeout = 120 + self.plan.produce_seconds * 4
        jobs = [(spark_like.spark_assign, cell.bootstrap, "bench-spark", ranges[n::CLIENT_PROCESSES], f"{query}-{n}",
                 SPARK_TASKS, timeout, cell.client_conf) for n in range(CLIENT_PROCESSES)]
        results, cpu = self._sampled(cell, jobs, timeout=timeout + 30)
        positions, ids, taken, reread, seconds, moved = _reads(results)
        metrics = {"seconds": seconds, "records": len(taken), "mb_s": moved / max(seconds, 1e-9) / 1e6,
                   "bytes_moved": moved, "tasks": len(ranges), "errors": sum(r["errors"] for r in results),
                   **exactly_once(acked, taken)}
        metrics["duplicates"] += reread   # no group: a position read twice is a range read twice
        if metrics["lost"]:
            metrics.update(self._lost(cell, acked, acked_at, positions, ids, taken))
        metrics.update(_cpu_per_gb(cpu, moved, results))
        return metrics

    def _lost(self, cell: Cell, acked: array[int], acked_at: array[int], positions: array[int], ids: array[int],
              taken: array[int]) -> dict[str, Any]:
        """Where the records the group never read went: at positions it read holding other records
        (`lost_read_over`: the upstream acknowledged two at one position), or still in the upstream's
        log (`lost_in_log`, of up to 20 asked directly: the group skipped them)."""
        at, read_over = spark_like.where_lost(set(acked) - set(taken), acked, acked_at, positions, ids)
        (probed,) = self._call(spark_like.ids_at, cell.upstream, "bench-spark", at[:20], cell.upstream_conf,
                               timeout=120)
        wanted = dict(zip(acked_at, acked, strict=True))
        shown = ", ".join(f"{p >> spark_like.OFFSET_BITS}@{p & ((1 << spark_like.OFFSET_BITS) - 1)}" for p in at[:5])
        self.log(f"  {cell.reference.name}: {len(at)} acknowledged records never read; partition@offset {shown}; "
                 f"read holding others {read_over}; ids the upstream holds there {probed['ids'][:5]}")
        return {"lost_read_over": read_over,
                "lost_in_log": sum(1 for p, i in zip(at, probed["ids"], strict=False) if i == wanted[p])}

    def _churn(self, cell: Cell, _round: int, distinct: bool = True) -> dict[str, Any]:
        """Connections opened, used once and closed, `CHURN_PARALLEL` at a time: the proxy's CPU per connection."""
        seconds = self.plan.produce_seconds
        job = (churn_clients.churn, cell.host, cell.port, "bench-churn", seconds, CHURN_PARALLEL, distinct)
        (metrics,), cpu = self._sampled(cell, [job], timeout=seconds + 60)
        if cpu is not None and metrics["connections"]:
            metrics["proxy_cpu_seconds"] = cpu.whole
            metrics["cpu_us_per_connection"] = cpu.whole / metrics["connections"] * 1e6
        return metrics

    def _churn_repeat(self, cell: Cell, round_no: int) -> dict[str, Any]:
        return self._churn(cell, round_no, distinct=False)

    def _light(self, cell: Cell, _round: int) -> dict[str, Any]:
        plan = self.plan
        (result,) = self._call(spark_like.light_produce, cell.bootstrap, "bench-light", plan.latency_seconds,
                               LIGHT_RATE, timeout=plan.latency_seconds * 3 + 60)
        return result

    def _latency(self, cell: Cell, _round: int) -> dict[str, Any]:
        plan = self.plan
        (result,) = self._call(workloads.latency, cell.bootstrap, "bench-latency", plan.latency_seconds,
                               plan.latency_rate, timeout=plan.latency_seconds * 3 + 60)
        return result

    def _classes(self, cell: Cell, _round: int) -> dict[str, Any]:
        seconds = self.plan.classes_seconds
        (result,) = self._call(workloads.service_classes, cell.bootstrap, "bench-classes", seconds, seconds - 6.0,
                               cell.reference.saturated, timeout=seconds + 180)
        return result

    def _entities(self, cell: Cell, _round: int) -> dict[str, Any]:
        pid = cell.proxy.pid if cell.proxy is not None else None
        before = proc_stats.sample(pid) if pid is not None else None
        (result,) = self._call(idle_clients.distinct_entities, cell.host, cell.port, self.plan.entities,
                               timeout=180)
        after = proc_stats.sample(pid) if pid is not None else None
        if before is not None and after is not None:
            grown = after.rss_bytes - before.rss_bytes
            result["rss_growth_mb"] = grown / 1e6
            result["rss_bytes_per_entity"] = grown / self.plan.entities
        return result

    def _connections(self, cell: Cell, _round: int) -> dict[str, Any]:
        plan = self.plan
        return self._held(cell, idle_clients.idle_connections, cell.host, cell.port, plan.connections,
                          plan.hold_seconds, timeout=plan.hold_seconds + 120)

    def _idle(self, cell: Cell, _round: int) -> dict[str, Any]:
        plan = self.plan
        hold = max(plan.hold_seconds, 2.0)
        return self._held(cell, idle_clients.idle_connections, cell.host, cell.port, plan.idle_connections, hold,
                          hold + 60, 30.0, timeout=hold + 300, connections=plan.idle_connections)

    def _busy(self, cell: Cell, _round: int) -> dict[str, Any]:
        plan = self.plan
        return self._held(cell, busy_clients.busy_connections, cell.host, cell.port, "bench-busy", TOPICS["bench-busy"],
                          plan.connections, plan.busy_seconds, timeout=plan.busy_seconds + 180)

    def _held(self, cell: Cell, func: Callable[..., dict[str, Any]], *args: Any, timeout: float,
              connections: int | None = None) -> dict[str, Any]:
        """Run a many-connections workload; add the proxy's peak RSS (over its baseline) and CPU."""
        count = connections or self.plan.connections
        pid = cell.proxy.pid if cell.proxy is not None else None
        baseline = proc_stats.sample(pid) if pid is not None else None
        peak = {"rss": 0}

        def watch() -> None:
            now = proc_stats.sample(pid) if pid is not None else None
            if now is not None:
                peak["rss"] = max(peak["rss"], now.rss_bytes)

        (result,) = self._call(func, *args, timeout=timeout, watch=watch)
        after = proc_stats.sample(pid) if pid is not None else None
        if baseline is not None and peak["rss"]:
            result["rss_mb"] = peak["rss"] / 1e6
            result["rss_baseline_mb"] = baseline.rss_bytes / 1e6
            result["rss_per_connection_kb"] = (peak["rss"] - baseline.rss_bytes) / 1e3 / count
        if baseline is not None and after is not None:
            result["proxy_cpu_percent"] = 100 * (after.cpu_seconds - baseline.cpu_seconds) / result["seconds"]
        return result


@dataclass(frozen=True)
class ProxyCpu:
    """The proxy's CPU over a workload: all of it (`whole`), and its trace over time."""

    whole: float
    trace: proc_stats.CpuTrace | None


def _reads(results: list[dict[str, Any]]) -> tuple[array[int], array[int], array[int], int, float, int]:
    """What the reader processes read, together: positions and ids, the distinct reads and how many
    were read again, the seconds from the first read to the last, and the bytes moved."""
    positions, ids = array("Q"), array("Q")
    for result in results:
        positions.frombytes(result.pop("positions"))
        ids.frombytes(result.pop("ids"))
    taken, again = spark_like.distinct_reads(positions, ids)
    seconds = max(r["last"] for r in results) - min(r["first"] for r in results)
    return positions, ids, taken, again, seconds, sum(r["bytes_moved"] for r in results)


def _cpu_per_gb(cpu: ProxyCpu | None, moved: int, results: list[dict[str, Any]]) -> dict[str, float]:
    """CPU seconds per GB over the span the clients moved data in (from the first `window` opened to
    the last closed, against the bytes moved within them): a client's connecting, metadata, group
    join and close cost per connection, not per byte, and would weigh on a short workload (the
    consume workload's 250 MB) by how many round trips set-up takes, not by how data flows.
    `cpu_s_per_gb_whole` is the whole run's CPU against every byte moved; `setup_cpu_s` the CPU
    outside the span. Without windows, the whole run's figure is the figure."""
    if cpu is None or moved <= 0:
        return {}
    figures = {"proxy_cpu_seconds": cpu.whole, "cpu_s_per_gb": cpu.whole / (moved / 1e9),
               "cpu_s_per_gb_whole": cpu.whole / (moved / 1e9)}
    windows = [r["window"] for r in results if r.get("window")]
    if cpu.trace is None or len(windows) != len(results):
        return figures
    in_window = sum(r.get("window_bytes", r["bytes_moved"]) for r in results)
    spent = cpu.trace.between(min(w[0] for w in windows), max(w[1] for w in windows))
    if spent is None or in_window <= 0:
        return figures
    return {**figures, "cpu_s_per_gb": spent / (in_window / 1e9), "setup_cpu_s": cpu.whole - spent}


def exactly_once(acked: array[int], taken: array[int]) -> dict[str, int]:
    """What the group read against what the broker acknowledged: every acknowledged id read exactly once
    means `lost` and `duplicates` are 0 (`unacknowledged`: read, though its acknowledgement never came)."""
    read = set(taken)
    wanted = set(acked)
    return {"lost": len(wanted - read), "duplicates": len(taken) - len(read),
            "unacknowledged": len(read - wanted)}


def _combine(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Several parallel clients' throughput results as one: rates and volumes add up."""
    if len(results) == 1:   # its window is read by `_cpu_per_gb`, not a figure of its own
        return {key: value for key, value in results[0].items() if key not in ("window", "window_bytes")}
    total: dict[str, Any] = {"clients": len(results)}
    for key in ("records", "mb_s", "records_s", "bytes_moved", "errors"):
        total[key] = sum(result[key] for result in results)
    total["seconds"] = max(result["seconds"] for result in results)
    return total


def _brief(metrics: dict[str, Any]) -> str:
    keys = ("mb_s", "records_s", "requests_s", "connections_s", "p50_ms", "p99_ms", "cpu_s_per_gb",
            "cpu_s_per_gb_whole", "cpu_us_per_connection", "setup_cpu_s", "proxy_cpu_percent",
            "connected", "stream_delivered_ratio", "stream_p99_ms", "batch_share_of_c", "batch_split_min",
            "batch_split_max", "recovery_s", "errors", "rss_mb", "rss_bytes_per_entity")
    parts = []
    for key in keys:
        value = metrics.get(key)
        if isinstance(value, (int, float)):
            parts.append(f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)


def run_rounds(runner: Runner, references: list[Reference], plans: dict[str, list[str]]) -> None:
    """Interleave: every round runs every reference once, in an order shuffled per round.

    A fixed or merely rotated order would always run, say, kqp-quotas right after kqp, so a
    neighbour's after-effects (a hot page cache, a dying broker's last CPU) would bias one pair
    every round. The shuffle is seeded by the round number, so runs stay comparable.
    """
    for round_no in range(runner.plan.rounds):
        runner.log(f"round {round_no + 1}/{runner.plan.rounds}")
        order = list(references)
        random.Random(round_no).shuffle(order)
        for ref in order:
            if ref.name in runner.unavailable:
                continue
            runner.run_cell(round_no, ref, plans[ref.name])


def workdir_for(out: Path) -> Path:
    path = out / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path
