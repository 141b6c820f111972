"""The picture of the service-classes run (README's figure), drawn from what the e2e measured.

`tests/e2e/test_pool_classes_saturated.py` draws it when KQP_CLASSES_RUN_PNG names a file: what the
broker took from the stream and from the batch jobs, per half second, without and with classes; the
allocation kqp's metrics showed for each class; the stream's delivery latency in both runs. matplotlib
comes with the `bench` extra; it is imported only when a picture is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STEP = 0.5


def draw_classes_run(path: Path, without: Any, ranked: Any, capacity: float, start: float, stop: float) -> None:
    """`without`, `ranked`: the e2e's outcomes (rate(a, b, prefix), rows, stream latencies)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, mid, low) = plt.subplots(3, 1, figsize=(8, 6.4), sharex=True, gridspec_kw={"height_ratios": [3, 2, 2]})
    end = max(at for at, _, _ in ranked.taken)
    steps = [STEP * k for k in range(int(end / STEP))]
    top.axhline(capacity / 1000, color="grey", linestyle="--", label="broker capacity C")
    for outcome, style, label in ((without, ":", "without classes"), (ranked, "-", "with classes")):
        for prefix, color, who in (("job-stream-", "tab:red", "stream"), ("job-batch-", "tab:blue", "4 batch jobs")):
            top.plot(steps, [outcome.rate(t, t + STEP, prefix) / 1000 for t in steps], linestyle=style, color=color,
                     linewidth=1.2, label=f"{who}, {label}")
    top.axvspan(start, stop, color="tab:red", alpha=0.06)
    top.set_ylabel("kB/s to the broker")
    top.set_ylim(0, 1.3 * capacity / 1000)
    top.legend(loc="upper right", fontsize=7, ncol=3)
    top.set_title("Service classes: a stream (100 kB/s) and four batch jobs in one adaptive pool, C = 400 kB/s",
                  fontsize=10)
    rows = ranked.rows
    for name, color in (("latency", "tab:red"), ("batch", "tab:blue")):
        mid.plot([r[0] for r in rows], [r[2].get(name, 0.0) / 1000 for r in rows], color=color, linewidth=1.2,
                 label=f"class {name}: allocation")
    mid.plot([r[0] for r in rows], [r[1] / 1000 for r in rows], color="grey", linewidth=0.8, label="pool budget")
    mid.set_ylabel("kB/s (kqp)")
    mid.set_ylim(0, 1.3 * capacity / 1000)
    mid.legend(loc="upper right", fontsize=7, ncol=3)
    for outcome, color, label in ((without, "tab:orange", "stream, without classes"),
                                  (ranked, "tab:green", "stream, with classes")):
        samples = outcome.stream.latencies
        low.scatter([at - outcome.started for at, _ in samples], [lat for _, lat in samples], s=1.5, color=color,
                    label=label)
    low.set_yscale("log")
    low.set_ylabel("delivery latency, s")
    low.set_xlabel("seconds")
    low.legend(loc="upper left", fontsize=7, markerscale=5)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    shrink(path)


def shrink(path: Path) -> None:
    """The PNG in 64 colours: a third of the bytes for a figure of a few flat colours (it is committed)."""
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=64)
    small.save(path, optimize=True)
