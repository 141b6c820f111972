"""Turns the raw measurements into medians, ratios, a printed table and the JSON results file.

Each figure is the median over rounds of one reference's one workload, never a mean: one round
disturbed by the machine's other work should not move the result. Comparisons are paired by round:
a ratio (kqp/direct) or an added latency (kqp p99 minus direct p99) is computed within each round
and the median of those is reported, so a round that was slow for everyone cancels out. Latency is
reported as what the path adds over direct, because the client's own time per request is the same
for every reference and is not the proxy's to own. A comparison is left out, not zeroed, when no
round measured both sides.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# (workload, metric) pairs summarised as medians; which of them a reference has depends on it.
METRICS: dict[str, tuple[str, ...]] = {
    "produce": ("mb_s", "records_s", "cpu_s_per_gb", "setup_cpu_s", "errors", "avg_request_kb", "rtt_avg_ms"),
    "consume": ("mb_s", "records_s", "cpu_s_per_gb", "setup_cpu_s", "errors"),
    "latency": ("p50_ms", "p99_ms", "p999_ms", "requests_s", "errors"),
    "connections": ("connected", "errors", "requests", "rss_mb", "rss_per_connection_kb"),
    "produce-parallel": ("mb_s", "records_s", "cpu_s_per_gb", "errors"),
    "produce-inflight5": ("mb_s", "records_s", "cpu_s_per_gb", "errors", "avg_request_kb", "rtt_avg_ms"),
    "entities": ("requests", "errors", "rss_growth_mb", "rss_bytes_per_entity"),
    "busy": ("connected", "errors", "requests_s", "mb_s", "rss_mb", "proxy_cpu_percent"),
    "spark-produce": ("mb_s", "records_s", "cpu_s_per_gb", "cpu_s_per_gb_whole", "setup_cpu_s", "errors"),
    "spark-consume": ("mb_s", "records_s", "cpu_s_per_gb", "cpu_s_per_gb_whole", "setup_cpu_s", "errors", "lost",
                      "duplicates", "rebalances", "redelivered"),
    "spark-assign": ("mb_s", "cpu_s_per_gb", "cpu_s_per_gb_whole", "errors", "lost", "duplicates", "tasks"),
    "churn": ("connections_s", "cpu_us_per_connection", "life_p50_ms", "life_p99_ms", "errors"),
    "churn-repeat": ("connections_s", "cpu_us_per_connection", "life_p50_ms", "life_p99_ms", "errors"),
    "light": ("p50_ms", "p99_ms", "requests_s", "errors"),
    "idle": ("connected", "errors", "rss_mb", "rss_per_connection_kb"),
    "classes": ("stream_delivered_ratio", "stream_p50_ms", "stream_p99_ms", "batch_share_of_c", "batch_split_min",
                "batch_split_max", "recovery_s", "errors"),
}
# Latency workloads, and whose latency theirs is set beside (paired by round) besides direct's.
LATENCY_WORKLOADS = {"latency": (), "light": ("relay",)}

# Ratios the performance goals are stated in: (label, workload, metric, numerator, denominator).
_MB_S_PAIRS = (("kqp", "direct"), ("kqp", "relay"), ("kqp", "tansu-proxy"), ("kqp-quotas", "kqp"),
               ("relay", "direct"), ("tansu-proxy", "direct"), ("kqp-tls", "kqp"), ("kqp-tls-both", "kqp"),
               ("kqp-cluster", "kqp-quotas"))
RATIOS: tuple[tuple[str, str, str, str, str], ...] = (
    *((f"{workload} {num}/{den}", workload, "mb_s", num, den)
      for workload in ("produce", "consume") for num, den in _MB_S_PAIRS),
    ("produce cpu_s_per_gb kqp/tansu-proxy", "produce", "cpu_s_per_gb", "kqp", "tansu-proxy"),
    *((f"{workload} cpu_s_per_gb {tls}/kqp", workload, "cpu_s_per_gb", tls, "kqp")
      for workload in ("produce", "consume") for tls in ("kqp-tls", "kqp-tls-both")),
    ("produce cpu_s_per_gb kqp-cluster/kqp-quotas", "produce", "cpu_s_per_gb", "kqp-cluster", "kqp-quotas"),
    # The goal for a pool that does not bind: within 5% of kqp-quotas' CPU per GB.
    *((f"{workload} cpu_s_per_gb kqp-pool/kqp-quotas", workload, "cpu_s_per_gb", "kqp-pool", "kqp-quotas")
      for workload in ("produce", "consume")),
    ("latency p99_ms kqp-cluster/kqp-quotas", "latency", "p99_ms", "kqp-cluster", "kqp-quotas"),
    ("connections rss_mb kqp/relay", "connections", "rss_mb", "kqp", "relay"),
    # What forwarding one request at a time (a request quota, `response_pending`) costs a producer.
    ("produce-inflight5 kqp-request-rate/kqp-producer-rate", "produce-inflight5", "mb_s", "kqp-request-rate",
     "kqp-producer-rate"),
    # Service classes: the stream's p99 with classes against without (the goal: at most 0.3).
    ("classes stream_p99_ms kqp-classes/kqp-adaptive", "classes", "stream_p99_ms", "kqp-classes", "kqp-adaptive"),
)
# What this tree's kqp is set beside another build's on (`kqp bench --baseline`): before and after.
BASELINE_METRICS = (("produce", "cpu_s_per_gb"), ("consume", "cpu_s_per_gb"), ("produce", "mb_s"),
                    ("consume", "mb_s"), ("latency", "p50_ms"), ("latency", "p99_ms"))
# CPU per GB is compared with the relay for every proxy measured (each kqp setup, tansu proxy):
# the relay is what moving the bytes through one more Python process costs at the least.
CPU_WORKLOADS = ("produce", "consume", "spark-produce", "spark-consume", "spark-assign")
CPU_BASELINE = "relay"
# ... and over a whole run, set-up included (what a Spark job pays), and per connection opened and closed.
WHOLE_RUN = (("spark-produce", "cpu_s_per_gb_whole"), ("spark-consume", "cpu_s_per_gb_whole"),
             ("spark-assign", "cpu_s_per_gb_whole"), ("churn", "cpu_us_per_connection"),
             ("churn-repeat", "cpu_us_per_connection"))


Series = dict[tuple[str, str, str], dict[int, float]]  # (reference, workload, metric) -> round -> value


def _series(measurements: list[dict[str, Any]]) -> Series:
    values: Series = {}
    for entry in measurements:
        metrics = entry.get("metrics")
        if not metrics:
            continue
        for metric in METRICS.get(entry["workload"], ()):
            value = metrics.get(metric)
            if isinstance(value, (int, float)):
                key = (entry["reference"], entry["workload"], metric)
                values.setdefault(key, {})[entry["round"]] = float(value)
    return values


def _paired(values: Series, num: tuple[str, str, str], den: tuple[str, str, str], op: str) -> float | None:
    """Median over the rounds that measured both sides of `num / den` (or `num - den`).

    Pairing within a round cancels what the machine's other work did to that round as a whole,
    which a ratio of two medians from different rounds would not.
    """
    tops, bottoms = values.get(num, {}), values.get(den, {})
    rounds = [r for r in tops if r in bottoms and (op == "-" or bottoms[r])]
    if not rounds:
        return None
    if op == "-":
        return statistics.median(tops[r] - bottoms[r] for r in rounds)
    return statistics.median(tops[r] / bottoms[r] for r in rounds)


def summarize(measurements: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """reference -> workload -> metric -> median over the rounds that measured it."""
    values = _series(measurements)
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for (ref, workload, metric), series in values.items():
        summary.setdefault(ref, {}).setdefault(workload, {})[metric] = statistics.median(series.values())
        summary[ref][workload].setdefault("rounds", float(len(series)))
    for ref, workloads in summary.items():
        for workload, others in LATENCY_WORKLOADS.items():
            latency = workloads.get(workload)
            if latency is None:
                continue
            for base in ("direct", *others):
                label = "added_" if base == "direct" else f"over_{base}_"
                for pct in ("p50_ms", "p99_ms"):
                    added = _paired(values, (ref, workload, pct), (base, workload, pct), "-")
                    if added is not None and ref != base:
                        latency[label + pct] = added
    return summary


def ratios(measurements: list[dict[str, Any]], summary: dict[str, dict[str, dict[str, float]]],
           throttle_bytes_s: float, workers_ref: str | None, baselines: Sequence[str] = ()) -> dict[str, float]:
    """The goal ratios, each the median of per-round ratios (see `_paired`); this tree's kqp over
    each of `baselines` (other kqp builds run beside it: `kqp bench --baseline`)."""
    values = _series(measurements)
    pairs = [(label, (num, workload, metric), (den, workload, metric))
             for label, workload, metric, num, den in RATIOS]
    pairs += [(f"{workload} {metric} kqp/{base}", ("kqp", workload, metric), (base, workload, metric))
              for base in baselines for workload, metric in BASELINE_METRICS]
    if workers_ref is not None:
        parallel = "produce-parallel", "mb_s"
        pairs += [(f"produce-parallel {workers_ref}/kqp", (workers_ref, *parallel), ("kqp", *parallel)),
                  ("produce-parallel kqp/direct", ("kqp", *parallel), ("direct", *parallel)),
                  (f"produce-parallel {workers_ref}/direct", (workers_ref, *parallel), ("direct", *parallel))]
    for ref in _cpu_compared(values):
        pairs += [(f"{workload} {metric} {ref}/{CPU_BASELINE}", (ref, workload, metric),
                   (CPU_BASELINE, workload, metric))
                  for workload, metric in (*((w, "cpu_s_per_gb") for w in CPU_WORKLOADS), *WHOLE_RUN)]
    found: dict[str, float] = {}
    for label, num, den in pairs:
        ratio = _paired(values, num, den, "/")
        if ratio is not None:
            found[label] = ratio
    for workload in ("produce", "consume"):
        throttled = summary.get("kqp-throttled", {}).get(workload, {}).get("mb_s")
        if throttled is not None:
            # How closely the quota holds over the run: 1.0 is exactly the quota.
            found[f"{workload} kqp-throttled/quota"] = throttled / (throttle_bytes_s / 1e6)
    return found


def _cpu_compared(values: Series) -> list[str]:
    """References with a CPU figure to set beside the baseline's, in the order they were measured."""
    refs = dict.fromkeys(ref for ref, workload, metric in values
                         if (metric == "cpu_s_per_gb" and workload in CPU_WORKLOADS) or (workload, metric) in WHOLE_RUN)
    return [ref for ref in refs if ref != CPU_BASELINE]


def cpu_table(results: dict[str, Any], title: str = "CPU s/GB",
              columns: Sequence[tuple[str, str]] = tuple((w, "cpu_s_per_gb") for w in CPU_WORKLOADS)) -> list[str]:
    """CPU s/GB (or what `columns` name: (workload, metric) pairs) of every reference side by side, each
    with its paired ratio to the relay's."""
    summary, found = results["summary"], results["ratios"]
    names = [name for name in results["references"]
             if any(m in summary.get(name, {}).get(w, {}) for w, m in columns)]
    if not names:
        return []
    measured = [(w, m) for w, m in columns if any(m in summary[name].get(w, {}) for name in names)]
    rows = [[title, *(w for w, _ in measured)]]
    for name in names:
        row = [name]
        for workload, metric in measured:
            text = _cell(summary[name].get(workload, {}).get(metric))
            ratio = found.get(f"{workload} {metric} {name}/{CPU_BASELINE}")
            row.append(text if ratio is None else f"{text} ({ratio:.2f}x {CPU_BASELINE})")
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(text.rjust(widths[i]) if i else text.ljust(widths[i]) for i, text in enumerate(row))
            for row in rows]


def _cell(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:.0f}"


COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("prod MB/s", "produce", "mb_s"),
    ("prod rec/s", "produce", "records_s"),
    ("cons MB/s", "consume", "mb_s"),
    ("p50 ms", "latency", "p50_ms"),
    ("p99 ms", "latency", "p99_ms"),
    ("+p50 ms", "latency", "added_p50_ms"),
    ("+p99 ms", "latency", "added_p99_ms"),
    ("prod CPU s/GB", "produce", "cpu_s_per_gb"),
    ("cons CPU s/GB", "consume", "cpu_s_per_gb"),
    ("conns ok", "connections", "connected"),
    ("conn errs", "connections", "errors"),
    ("RSS MB", "connections", "rss_mb"),
    ("par MB/s", "produce-parallel", "mb_s"),
    ("if5 MB/s", "produce-inflight5", "mb_s"),
    ("B/entity", "entities", "rss_bytes_per_entity"),
    ("busy errs", "busy", "errors"),
    ("busy req/s", "busy", "requests_s"),
    ("spark MB/s", "spark-produce", "mb_s"),
    ("read MB/s", "spark-consume", "mb_s"),
    ("lost", "spark-consume", "lost"),
    ("dups", "spark-consume", "duplicates"),
    ("assign MB/s", "spark-assign", "mb_s"),
    ("assign lost", "spark-assign", "lost"),
    ("assign dups", "spark-assign", "duplicates"),
    ("churn conn/s", "churn", "connections_s"),
    ("churn errs", "churn", "errors"),
    ("light p50", "light", "p50_ms"),
    ("light p99", "light", "p99_ms"),
    ("p99-relay", "light", "over_relay_p99_ms"),
    ("idle MB", "idle", "rss_mb"),
    ("stream deliv", "classes", "stream_delivered_ratio"),
    ("stream p99 ms", "classes", "stream_p99_ms"),
    ("batch xC", "classes", "batch_share_of_c"),
    ("batch split min", "classes", "batch_split_min"),
    ("back s", "classes", "recovery_s"),
)


def table(results: dict[str, Any]) -> str:
    """The human summary: one row per reference, then the ratios and anything unavailable."""
    summary = results["summary"]
    names = list(results["references"])
    columns = [col for col in COLUMNS if any(col[1] in summary.get(n, {}) for n in names)]
    header = ["reference", *(col[0] for col in columns)]
    rows = [header]
    for name in names:
        if results["references"][name]["status"] != "ok":
            rows.append([name, "unavailable"])
            continue
        row = [name]
        for _, workload, metric in columns:
            row.append(_cell(summary.get(name, {}).get(workload, {}).get(metric)))
        rows.append(row)
    # An "unavailable" row is two cells wide, wider than a header with no column measured.
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(map(len, rows)))]
    lines = ["  ".join(text.rjust(widths[i]) if i else text.ljust(widths[i])
                       for i, text in enumerate(row)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("")
    lines.append(f"medians of {results['settings']['rounds']} round(s); "
                 "+p50/+p99: added over direct; CPU and RSS are the proxy process tree's")
    cpu = cpu_table(results)
    if cpu:
        lines.append("")
        lines.extend(cpu)
        lines.append(f"(the proxy's CPU per GB moved, median; in brackets its ratio to the {CPU_BASELINE}'s, "
                     "paired by round)")
    whole = cpu_table(results, "whole run", WHOLE_RUN)
    if whole:
        lines.append("")
        lines.extend(whole)
        lines.append("(set-up included: CPU s/GB over the whole run, us of CPU per connection for churn)")
    if results["ratios"]:
        lines.append("ratios:")
        width = max(map(len, results["ratios"]))
        lines.extend(f"  {label:{width}} {value:.3f}" for label, value in results["ratios"].items())
    for name, info in results["references"].items():
        if info["status"] != "ok":
            reason = info["reason"] or ""
            # The end of a traceback says most; results.json keeps the whole reason.
            lines.append(f"{name}: unavailable: {reason if len(reason) < 240 else '...' + reason[-237:]}")
    return "\n".join(lines)


def sizing(results: dict[str, Any]) -> str:
    """What README.md's Sizing section quotes, per proxy measured: cores per 100 MB/s (CPU s/GB / 10),
    memory per connection (busy and idle) and latency added, each a median of the run."""
    summary = results["summary"]
    lines = []
    for name, workloads in summary.items():
        if name == "direct":
            continue
        cores = [f"{w} {workloads[w]['cpu_s_per_gb'] / 10:.3f}" for w in CPU_WORKLOADS
                 if "cpu_s_per_gb" in workloads.get(w, {})]
        memory = [f"{label} {workloads[w]['rss_per_connection_kb']:.1f} KB"
                  for label, w in (("per connection", "connections"), ("per idle connection", "idle"))
                  if "rss_per_connection_kb" in workloads.get(w, {})]
        latency = [f"{label} {workloads[w][m]:+.2f} ms" for label, w, m in
                   (("p50 over direct", "latency", "added_p50_ms"), ("p99 over direct", "latency", "added_p99_ms"),
                    ("light p99 over relay", "light", "over_relay_p99_ms")) if m in workloads.get(w, {})]
        if cores or memory or latency:
            lines.append(f"{name}: cores per 100 MB/s: {', '.join(cores) or '-'}; memory: {', '.join(memory) or '-'}; "
                         f"latency: {', '.join(latency) or '-'}")
    return "sizing (medians):\n" + "\n".join("  " + line for line in lines) if lines else ""


def write_json(results: dict[str, Any], out: Path) -> Path:
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=2, sort_keys=False))
    return path
