"""`kqp bench --fidelity`: every client family under every quota type through kqp, Kafka as referee.

Apache Kafka is started from the jars tests/jvm/kafka/pom.xml resolves (Java 17 and Maven), at its
default quota windows (11 x 1 s), with kqp in front of it running the fidelity matrix of
tests/helpers/fidelity.py for 60 s: each cell one quota, its clients flat out, all at once. Each
cell of a quota type Kafka has (producer and consumer bytes, request_percentage, mutations) also
runs straight to Kafka under Kafka's own quota, set through its Admin API: the pair's two ratios
side by side. Over several rounds the table shows medians, and each pair's kqp/Kafka ratio paired by
round. It drives the client programs and the Kafka launcher under tests/, so it runs from a source
checkout; the clients' toolchains (Go, Node.js, a JDK) as the tests need them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WINDOWS = {"window_size_seconds": 1.0, "window_count": 11}   # Kafka's defaults
SECONDS = 60.0
TESTS = Path(__file__).resolve().parents[2] / "tests"


def run(args: argparse.Namespace) -> int:
    """The fidelity matrix, `args.rounds` times (default 1); prints the table, writes fidelity.json."""
    if not (TESTS / "helpers" / "fidelity.py").exists():
        print("kqp bench --fidelity runs from a source checkout: it drives the client programs and the Kafka "
              f"launcher under tests/ (not found at {TESTS})", file=sys.stderr)
        return 2
    sys.path.insert(0, str(TESTS))
    from helpers import fidelity
    from helpers.kqp_process import start_kqp
    from upstreams import jvm
    from upstreams.kafka import KafkaCluster

    try:
        jvm.java()
        if shutil.which("mvn") is None:
            raise jvm.JvmMissing("no `mvn` on PATH: install Maven (Debian: maven)")
        jvm.jars("kafka")
    except jvm.JvmMissing as exc:
        print(f"kqp bench --fidelity starts Apache Kafka from tests/jvm/kafka/pom.xml and needs Java 17 and "
              f"Maven: {exc}", file=sys.stderr)
        return 2
    seconds = args.seconds or SECONDS
    cells = fidelity.standard_cells(WINDOWS, "kafka", referee=True)
    rounds: list[list[Any]] = []
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kqp-fidelity-") as tmp:
        work = Path(tmp)
        print(f"starting Apache Kafka (default quota windows) in {work}", flush=True)
        with KafkaCluster(work / "kafka", jmx=True) as cluster:
            for index in range(args.rounds or 1):
                print(f"round {index + 1}: {len(cells)} cells for {seconds:.0f} s", flush=True)
                began = time.monotonic()
                with contextlib.ExitStack() as stack:
                    found = fidelity.run_matrix(stack, functools.partial(_stopped_with, stack, start_kqp,
                                                                         work / f"kqp-{index}"),
                                                cluster.bootstrap, cells, windows=WINDOWS, seconds=seconds,
                                                jmx_url=cluster.jmx_url())
                    verdicts = fidelity.judge_all(found, cells)
                rounds.append(verdicts)
                print(fidelity.table(verdicts), flush=True)
                print(f"round {index + 1} took {time.monotonic() - began:.0f} s", flush=True)
    rows = summarize(rounds, functools.partial(fidelity.agrees, window=WINDOWS["window_size_seconds"]))
    (out / "fidelity.json").write_text(json.dumps({"windows": WINDOWS, "seconds": seconds, "rows": rows}, indent=1))
    print()
    print(pair_table(rows))
    print(f"\nresults: {out / 'fidelity.json'}")
    # As tests/e2e/test_fidelity_matrix.py judges: over the quota by the ceiling slope; under it by the
    # plain slope, or by what the whole run gave, the allowance aside (large crossing requests leave a
    # debt paid back over the run).
    bad = [r for r in rows if r["kqp"] is None or r["kqp"] > 1.05 or r["errors"] or not r["agrees"]
           or max(r["kqp_slope"] or 0.0, r["kqp_average"] or 0.0) < 0.95]
    return 1 if bad else 0


def _median(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def summarize(rounds: list[list[Any]], agrees: Callable[[Any], bool]) -> list[dict[str, Any]]:
    """One row per cell through kqp, with its Kafka twin's figures where it has one: medians over
    rounds, and kqp/Kafka paired by round; `agrees` says whether a verdict's told and muted agree."""
    rows: list[dict[str, Any]] = []
    for position, verdict in enumerate(rounds[0]):
        cell = verdict.cell
        if cell.via != "kqp":
            continue
        mine = [r[position] for r in rounds]
        twins = [next((v for v in r if v.cell.via == "kafka" and v.cell.name == f"{cell.name}-kafka"), None)
                 for r in rounds]
        paired = [m.ratio / t.ratio for m, t in zip(mine, twins, strict=True)
                  if t is not None and m.ratio is not None and t.ratio]
        rows.append({
            "cell": cell.name, "clients": verdict.families, "quota_type": cell.quota_type, "scope": cell.scope,
            "quota": cell.quota, "kqp": _median([m.ratio for m in mine]),
            "kqp_slope": _median([m.slope for m in mine]),
            "kqp_average": _median([m.average for m in mine]),
            "kafka": _median([t.ratio if t else None for t in twins]) if any(twins) else None,
            "paired": _median(list(paired)) if paired else None,
            "kqp_burst_s": _median([m.burst for m in mine]),
            "kafka_burst_s": _median([t.burst if t else None for t in twins]) if any(twins) else None,
            "kqp_throttle_max_ms": max(m.throttle_max_ms for m in mine),
            "kqp_told_s": _median([m.told_s for m in mine]),
            "kqp_muted_s": _median([m.imposed_s for m in mine]),
            "agrees": all(agrees(m) for m in mine),
            "kafka_throttle_max_ms": max((t.throttle_max_ms for t in twins if t), default=None),
            "errors": sum(len(m.errors) + m.timeouts for m in mine),
            "kafka_errors": sum(len(t.errors) + t.timeouts for t in twins if t),
            "split": mine[-1].shares if len(mine[-1].shares) > 1 else None,
        })
    return rows


def pair_table(rows: list[dict[str, Any]]) -> str:
    """The fidelity table: each cell's ratio through kqp and straight to Kafka, bursts, throttles."""
    def fmt(value: float | None, spec: str = ".3f") -> str:
        return "-" if value is None else format(value, spec)

    lines = [f"{'cell':18} {'clients':16} {'quota type':22} {'scope':6} {'kqp':>6} {'Kafka':>6} {'paired':>6} "
             f"{'burst s kqp/Kafka':>17} {'max throttle ms kqp/Kafka':>25} {'told/muted s, kqp':>17} {'errors':>6}"]
    for r in rows:
        burst = f"{fmt(r['kqp_burst_s'], '.1f')}/{fmt(r['kafka_burst_s'], '.1f')}"
        kafka_ms = r["kafka_throttle_max_ms"]
        throttle = f"{r['kqp_throttle_max_ms']}/{'-' if kafka_ms is None else kafka_ms}"
        told = f"{fmt(r['kqp_told_s'], '.1f')}/{fmt(r['kqp_muted_s'], '.1f')}{'' if r['agrees'] else '!'}"
        lines.append(f"{r['cell']:18} {r['clients'][:16]:16} {r['quota_type']:22} {r['scope']:6} {fmt(r['kqp']):>6} "
                     f"{fmt(r['kafka']):>6} {fmt(r['paired']):>6} {burst:>17} {throttle:>25} {told:>17} "
                     f"{r['errors']:>3}/{r['kafka_errors'] if r['kafka'] is not None else '-'}")
    return "\n".join(lines)


def _stopped_with(stack: contextlib.ExitStack, start_kqp: Any, directory: Path, *args: Any, **kwargs: Any) -> Any:
    """The test helper's `start_kqp`, its process stopped when `stack` closes (the tests' fixture does
    that for them; the bench must too, or each round leaves a kqp running)."""
    process = start_kqp(directory, *args, **kwargs)
    stack.callback(process.stop)
    return process
