"""The throttled producer's delivered rate against its quota, as data and as a PNG (`kqp demo --plot`).

A byte-rate quota does not hold a new client to a flat line: Kafka's sampled rate lets its first
burst of about `(window_count - 1) * window_size * quota` bytes through at once, throttles it back
to the quota, and lets it burst again when the sample holding that burst expires, once per span.
The plot shows that sawtooth.

`rate_series` turns delivery times into per-window rates, plus the rate kqp's own `SampledRate`
reads from the same deliveries; it is pure, so tests feed it synthetic deliveries. `write_plot`
draws the series (matplotlib is optional and imported only there). The PNG carries the series as
JSON in a tEXt chunk (`SERIES_KEY`), so a test or a user can check its numbers (`read_series`).
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from kqp.quotas.rates.sampled_rate import SampledRate

SERIES_KEY = "kqp-demo-series"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NO_MATPLOTLIB = "matplotlib is not installed (pip install matplotlib, or the 'bench' extra)"


@dataclass(frozen=True)
class RateSeries:
    """Per-window delivered rates of one producer, with the quota and windows it ran under."""

    quota: float  # bytes/s
    window_seconds: float
    window_count: int
    times: list[float]  # end of each window, seconds since the producer started
    delivered: list[float]  # bytes/s delivered within each window
    measured: list[float]  # bytes/s as a SampledRate reads the deliveries at the window's end

    @property
    def span(self) -> float:
        """The measured span, `window_count * window_seconds`: the echo's period."""
        return self.window_count * self.window_seconds

    def rate_after_first_span(self) -> tuple[float, int] | None:
        """The delivered rate over the whole spans after the first, and how many there were (None
        for a run under two spans). Each span holds one echo, so this is the rate the quota held
        the producer to; a partial span would count an echo or miss one."""
        spans = len(self.delivered) // self.window_count
        later = self.delivered[self.window_count: spans * self.window_count]
        return (sum(later) / len(later), spans - 1) if later else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RateSeries:
        return cls(**json.loads(text))


def rate_series(deliveries: Iterable[tuple[float, int]], start: float, end: float, quota: float,
                window_seconds: float, window_count: int) -> RateSeries:
    """Bin `(time, bytes)` deliveries into windows of `window_seconds` from `start` to `end`."""
    if not end > start:
        raise ValueError(f"end must be after start, got {start} .. {end}")
    count = math.ceil((end - start) / window_seconds)
    sums = [0.0] * count
    ordered = sorted((t, n) for t, n in deliveries if start <= t < end)
    for t, nbytes in ordered:
        sums[min(int((t - start) / window_seconds), count - 1)] += nbytes
    rate = SampledRate(window_seconds, window_count)
    measured: list[float] = []
    pending = iter(ordered)
    nxt = next(pending, None)
    times = [round((i + 1) * window_seconds, 9) for i in range(count)]
    for t in times:
        while nxt is not None and nxt[0] - start < t:
            rate.record(nxt[1], nxt[0] - start)
            nxt = next(pending, None)
        measured.append(rate.measure(t))
    return RateSeries(quota, window_seconds, window_count, times, [s / window_seconds for s in sums], measured)


def first_delivery(series: RateSeries) -> float:
    """Start of the first window that delivered anything (0.0 if none did)."""
    for t, r in zip(series.times, series.delivered, strict=True):
        if r > 0:
            return round(t - series.window_seconds, 9)
    return 0.0


def echo_window(series: RateSeries) -> int | None:
    """Index of the fullest window in the span after the first one: where the burst comes back."""
    start = first_delivery(series) + series.span
    candidates = [i for i, t in enumerate(series.times) if start < t <= start + series.span]
    if not candidates:
        return None
    return max(candidates, key=lambda i: series.delivered[i])


def write_plot(series: RateSeries, path: Path, title: str = "") -> Path | str:
    """Write the PNG to `path`; returns the path, or the reason no plot was written."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    except ImportError:
        return NO_MATPLOTLIB
    kib = 1024.0
    fig = Figure(figsize=(9, 4.2))
    ax = fig.add_subplot()
    ax.bar([t - series.window_seconds for t in series.times], [r / kib for r in series.delivered],
           width=series.window_seconds, align="edge", color="tab:blue", alpha=0.55,
           label=f"delivered per {series.window_seconds:g} s window")
    ax.plot(series.times, [r / kib for r in series.measured], color="tab:green", linewidth=1.6,
            label=f"rate as kqp measures it ({series.window_count} windows)")
    ax.axhline(series.quota / kib, color="tab:red", linestyle="--", linewidth=1.4,
               label=f"quota {series.quota / kib:g} KiB/s")
    first = first_delivery(series)
    peak = max(series.delivered) / kib
    ax.annotate(f"first burst: about {series.window_count - 1} windows' worth of quota at once",
                (first + series.window_seconds, series.delivered[int(first / series.window_seconds)] / kib),
                xytext=(14, -4), textcoords="offset points", fontsize=8, va="top")
    boundary, k = first + series.span, 1
    while boundary < series.times[-1]:
        ax.axvline(boundary, color="grey", linestyle=":", linewidth=1)
        ax.text(boundary, peak * 1.04, f" +{k} span", fontsize=7, color="dimgrey", va="bottom")
        boundary, k = boundary + series.span, k + 1
    echo = echo_window(series)
    # Kafka's sampled rate lets the burst through again when its samples expire; steady does not.
    if echo is not None and series.delivered[echo] > 2 * series.quota:
        ax.annotate("echo: the burst's samples expired", (series.times[echo], series.delivered[echo] / kib),
                    xytext=(14, -4), textcoords="offset points", fontsize=8, va="top")
    elif echo is not None:
        ax.annotate("then the quota, with no echo", (first + series.span, series.quota / kib),
                    xytext=(14, 40), textcoords="offset points", fontsize=8, va="bottom")
    ax.set_ylim(0, peak * 1.15)
    ax.set_xlabel(f"seconds since the producer started (dotted: spans of {series.window_count} x "
                  f"{series.window_seconds:g} s after its first delivery)", fontsize=8)
    ax.set_ylabel("KiB/s")
    ax.set_title(title or "a producer over its byte-rate quota, through kqp", fontsize=10)
    ax.set_xlim(0, series.times[-1])
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, format="png", metadata={SERIES_KEY: series.to_json()})
    return path


def png_text_chunks(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG, checked chunk by chunk (signature, lengths, CRCs, IEND last)."""
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG: bad signature")
    texts: dict[str, str] = {}
    pos, kinds = len(PNG_SIGNATURE), []
    while pos < len(data):
        if pos + 8 > len(data):
            raise ValueError("truncated PNG chunk header")
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc_end = pos + 12 + length
        if crc_end > len(data) or len(body) != length:
            raise ValueError(f"truncated PNG chunk {kind!r}")
        (crc,) = struct.unpack(">I", data[pos + 8 + length:crc_end])
        if zlib.crc32(kind + body) != crc:
            raise ValueError(f"bad CRC in PNG chunk {kind!r}")
        kinds.append(kind)
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            texts[key.decode("latin-1")] = value.decode("latin-1")
        pos = crc_end
    if not kinds or kinds[0] != b"IHDR" or kinds[-1] != b"IEND" or b"IDAT" not in kinds:
        raise ValueError(f"not a complete PNG: chunks {kinds[:3]}...{kinds[-1:]}")
    return texts


def read_series(path: Path) -> RateSeries:
    """The series a PNG written by `write_plot` was drawn from."""
    texts = png_text_chunks(path.read_bytes())
    if SERIES_KEY not in texts:
        raise ValueError(f"{path}: no {SERIES_KEY} chunk")
    return RateSeries.from_json(texts[SERIES_KEY])
