"""The picture of one adaptive run (issue 22's README figure), drawn from what the e2e measured.

`tests/e2e/test_adaptive_saturated.py` draws it when KQP_ADAPTIVE_RUN_PNG names a file: the budget
kqp's metrics showed every window against the broker's capacity and what it delivered for the pool,
the pool's latency against its target, and the bystander's delivery latency behind the adaptive and
the static pool. matplotlib comes with the `bench` extra; it is imported only when a picture is
asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def draw_run(path: Path, rows: Sequence[Any], capacity: Sequence[tuple[float, float]], target: float,
             bystander: dict[str, Sequence[tuple[float, float]]], title: str) -> None:
    """`rows`: the trace (at, budget, latency, delivered); `capacity`: (from, C) steps; `bystander`:
    label -> (at, latency) samples; times in seconds from the run's start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, mid, low) = plt.subplots(3, 1, figsize=(8, 6.4), sharex=True,
                                        gridspec_kw={"height_ratios": [3, 2, 2]})
    end = max(r.at for r in rows)
    steps = [*capacity, (end, capacity[-1][1])]
    top.step([t for t, _ in steps], [c / 1000 for _, c in steps], where="post", color="grey", linestyle="--",
             label="broker capacity C")
    top.plot([r.at for r in rows], [r.budget / 1000 for r in rows], label="effective budget", linewidth=1.6)
    top.plot([r.at for r in rows], [r.delivered / 1000 for r in rows], label="delivered for the pool",
             linewidth=0.8, alpha=0.7)
    top.set_ylabel("kB/s")
    top.set_ylim(0, 1.5 * max(c for _, c in capacity) / 1000)
    top.legend(loc="upper left", fontsize=8, ncol=3)
    top.set_title(title, fontsize=10)
    measured = [r for r in rows if r.latency is not None]
    mid.plot([r.at for r in measured], [r.latency * 1000 for r in measured], linewidth=0.8, color="tab:orange",
             label="pool latency (window median, forward to response)")
    mid.axhline(target * 1000, color="grey", linestyle="--", label="target")
    mid.set_ylabel("ms")
    mid.set_ylim(0, 5 * target * 1000)
    mid.legend(loc="upper right", fontsize=8)
    for (label, samples), color in zip(bystander.items(), ("tab:red", "tab:blue"), strict=False):
        low.scatter([t for t, _ in samples], [s for _, s in samples], s=2, color=color, label=label)
    low.set_yscale("log")
    low.set_ylabel("delivery latency, s")
    low.set_xlabel("seconds")
    low.legend(loc="center right", fontsize=8, markerscale=4)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
