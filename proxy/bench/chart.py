"""The benchmark's PNG chart: one panel per question the performance goals ask.

Panels: produce and consume throughput (MB/s, and two producers at once where kqp's workers are
measured), latency added over direct (p50, p99), CPU seconds
per GB moved, and proxy RSS with the connections held. matplotlib is an optional dependency (the
`bench` extra); without it the chart is skipped with a note and the JSON and table still stand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PANELS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    ("throughput, MB/s (higher is better)", (("produce", "mb_s", "produce"), ("consume", "mb_s", "consume"),
                                             ("produce-parallel", "mb_s", "2 producers"))),
    ("latency added over direct, ms", (("latency", "added_p50_ms", "p50"), ("latency", "added_p99_ms", "p99"))),
    ("proxy CPU seconds per GB", (("produce", "cpu_s_per_gb", "produce"),
                                  ("consume", "cpu_s_per_gb", "consume"))),
    ("proxy RSS with connections held, MB", (("connections", "rss_mb", "RSS"),)),
)


def write_chart(results: dict[str, Any], out: Path) -> Path | str:
    """Write out/chart.png; returns its path, or the reason no chart was written."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on servers and CI
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed (pip install 'kafka-quota-proxy[bench]')"
    summary = results["summary"]
    names = [name for name, info in results["references"].items() if info["status"] == "ok"]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    for ax, (title, series) in zip(axes.flat, PANELS, strict=True):
        width = 0.8 / len(series)
        for index, (workload, metric, label) in enumerate(series):
            values = [summary.get(name, {}).get(workload, {}).get(metric) for name in names]
            positions = [i + (index - (len(series) - 1) / 2) * width for i in range(len(names))]
            heights = [value if value is not None else 0.0 for value in values]
            bars = ax.bar(positions, heights, width, label=label)
            for bar, value in zip(bars, values, strict=True):
                if value is not None:
                    ax.annotate(f"{value:.3g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                ha="center", va="bottom", fontsize=7)
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
        ax.axhline(0, color="black", linewidth=0.5)
        ax.margins(y=0.25)  # headroom so the legend does not cover the tallest bar's label
        if len(series) > 1:
            ax.legend(fontsize=8)
    machine = results.get("machine", {})
    fig.suptitle(f"kqp bench: medians of {results['settings']['rounds']} round(s), "
                 f"{machine.get('cpus', '?')} CPUs, {machine.get('cpu_model', '')}", fontsize=11)
    fig.tight_layout()
    path = out / "chart.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
