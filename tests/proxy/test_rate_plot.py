"""The demo's rate plot: per-window rates and kqp's measured rate from deliveries, and the PNG.

Deliveries are synthetic, shaped like the throttled producer's: windows of 0.2 s x 11 (span 2.2 s),
quota 256 KiB/s, so a new client's burst allowance is 10 x 0.2 s x 256 KiB/s = 512 KiB.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kqp.proxy.tools.rate_plot import (
    NO_MATPLOTLIB,
    SERIES_KEY,
    echo_window,
    first_delivery,
    png_text_chunks,
    rate_series,
    read_series,
    write_plot,
)

KIB = 1024
QUOTA = 256 * KIB
# a 512 KiB burst at 0.05 s, one 64 KiB batch at 0.5 s, the burst again at 2.5 s; run ends at 3.0 s
DELIVERIES = [(0.05, 256 * KIB), (0.05, 256 * KIB), (0.5, 64 * KIB), (2.5, 512 * KIB)]


def series():
    return rate_series(DELIVERIES, 0.0, 3.0, QUOTA, 0.2, 11)


def test_windows_and_delivered_rates() -> None:
    s = series()
    assert s.times == pytest.approx([0.2 * (i + 1) for i in range(15)])  # 3.0 s / 0.2 s = 15 windows
    assert s.delivered[0] == pytest.approx(512 * KIB / 0.2)  # 2560 KiB/s: the first burst
    assert s.delivered[2] == pytest.approx(64 * KIB / 0.2)  # the 0.4-0.6 s window
    assert s.delivered[12] == pytest.approx(512 * KIB / 0.2)  # 2.4-2.6 s: the echo
    assert sum(s.delivered) * 0.2 == pytest.approx(sum(n for _, n in DELIVERIES))
    assert s.span == pytest.approx(2.2)


def test_measured_is_kafkas_sampled_rate() -> None:
    s = series()
    # at 0.2 s: one sample, started 0.05 s; 0 full windows elapsed, so 10 are assumed behind it:
    # W = 0.15 + 10 x 0.2 = 2.15 s, rate 512 KiB / 2.15 s = 238 KiB/s, within the quota
    assert s.measured[0] == pytest.approx(512 * KIB / 2.15)
    # at 2.4 s the burst's sample (last event 0.05 s) is 2.35 s >= 2.2 s old and purged; the 64 KiB
    # sample (0.5 s) is left: elapsed 1.9 s, 9 full windows, padded by one: 64 KiB / 2.1 s
    assert s.measured[11] == pytest.approx(64 * KIB / 2.1)
    assert s.measured[11] < QUOTA < s.measured[12]  # which is why the client may burst again


def test_the_held_rate_is_judged_over_whole_spans_after_the_first() -> None:
    # 3.0 s is one span and a part: nothing whole after the first span to judge.
    assert series().rate_after_first_span() is None
    # To 6.6 s, three spans of 11 windows: the two after the first hold the echo at 2.5 s (512 KiB)
    # and 1000 KiB at 5.0 s, over 4.4 s; the 64 KiB at 0.5 s is in the first, 9 MiB at 6.7 s in none.
    longer = rate_series([*DELIVERIES, (5.0, 1000 * KIB), (6.7, 9 * 1024 * KIB)], 0.0, 6.8, QUOTA, 0.2, 11)
    rate, spans = longer.rate_after_first_span()
    assert spans == 2 and rate == pytest.approx(1512 * KIB / 4.4)


def test_burst_and_echo_are_found() -> None:
    s = series()
    assert first_delivery(s) == 0.0
    # the fullest window in the span after the first one: 2.4-2.6 s
    assert echo_window(s) == 12
    assert echo_window(rate_series(DELIVERIES, 0.0, 2.0, QUOTA, 0.2, 11)) is None


def test_deliveries_outside_the_run_are_left_out() -> None:
    s = rate_series([(-1.0, 10), (0.1, 20), (1.0, 30)], 0.0, 1.0, QUOTA, 0.5, 3)
    assert s.delivered == [40.0, 0.0]
    with pytest.raises(ValueError):
        rate_series([], 1.0, 1.0, QUOTA, 0.2, 11)


def test_png_carries_the_series_it_was_drawn_from(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    s = series()
    path = write_plot(s, tmp_path / "sub" / "plot.png")
    assert path == tmp_path / "sub" / "plot.png"
    data = path.read_bytes()
    assert SERIES_KEY in png_text_chunks(data)
    assert read_series(path) == s
    # a flipped byte inside a chunk fails its CRC
    tampered = bytearray(data)
    tampered[40] ^= 0xFF
    with pytest.raises(ValueError):
        png_text_chunks(bytes(tampered))
    with pytest.raises(ValueError):
        png_text_chunks(b"GIF89a" + data[6:])


def test_without_matplotlib_the_reason_is_returned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes the import fail
    assert write_plot(series(), tmp_path / "plot.png") == NO_MATPLOTLIB
    assert not (tmp_path / "plot.png").exists()
