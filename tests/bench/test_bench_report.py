"""Pure parts of the benchmark: medians, added latency, ratios, the table, percentiles, profiles."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from kqp.proxy.bench import profile_summary, report
from kqp.proxy.bench.workloads import percentile


def _m(round_no: int, ref: str, workload: str, **metrics: float) -> dict:
    return {"round": round_no, "reference": ref, "workload": workload, "metrics": metrics}


MEASUREMENTS = [
    _m(0, "direct", "produce", mb_s=100.0, records_s=1000.0, errors=0),
    _m(1, "direct", "produce", mb_s=300.0, records_s=3000.0, errors=0),
    _m(2, "direct", "produce", mb_s=200.0, records_s=2000.0, errors=0),
    _m(0, "kqp", "produce", mb_s=90.0, records_s=900.0, cpu_s_per_gb=2.0, errors=0),
    _m(1, "kqp", "produce", mb_s=170.0, records_s=1700.0, cpu_s_per_gb=4.0, errors=0),
    {"round": 2, "reference": "kqp", "workload": "produce", "error": "proxy exited"},
    _m(0, "direct", "latency", p50_ms=0.2, p99_ms=1.0),
    _m(0, "kqp", "latency", p50_ms=0.35, p99_ms=1.5),
    _m(0, "kqp-throttled", "produce", mb_s=12.0),
]


def test_summary_is_the_median_over_measured_rounds() -> None:
    summary = report.summarize(MEASUREMENTS)
    assert summary["direct"]["produce"]["mb_s"] == 200.0  # median of 100, 300, 200
    assert summary["kqp"]["produce"]["mb_s"] == 130.0  # median of 90, 170; the failed round left out
    assert summary["kqp"]["produce"]["cpu_s_per_gb"] == 3.0
    assert summary["kqp"]["produce"]["rounds"] == 2.0


def test_latency_is_also_reported_as_added_over_direct() -> None:
    latency = report.summarize(MEASUREMENTS)["kqp"]["latency"]
    assert latency["added_p50_ms"] == pytest.approx(0.15)  # 0.35 - 0.2
    assert latency["added_p99_ms"] == pytest.approx(0.5)  # 1.5 - 1.0


def test_ratios_are_paired_by_round_and_only_where_both_sides_were_measured() -> None:
    found = report.ratios(MEASUREMENTS, report.summarize(MEASUREMENTS), throttle_bytes_s=10e6,
                          workers_ref=None)
    # Round 0: 90/100 = 0.9; round 1: 170/300 = 0.5667; round 2 failed for kqp. Median = 0.7333,
    # not 130/200 = 0.65, the ratio of medians taken from different rounds.
    assert found["produce kqp/direct"] == pytest.approx((0.9 + 170 / 300) / 2)
    assert "produce kqp/relay" not in found  # no relay measured: left out, not zero
    assert found["produce kqp-throttled/quota"] == pytest.approx(1.2)  # 12 MB/s against 10 MB/s


def test_table_lists_every_reference_and_says_why_one_is_missing() -> None:
    summary = report.summarize(MEASUREMENTS)
    results = {
        "summary": summary,
        "settings": {"rounds": 3},
        "references": {
            "direct": {"status": "ok"}, "kqp": {"status": "ok"}, "kqp-throttled": {"status": "ok"},
            "tansu-proxy": {"status": "unavailable", "reason": "no proxy subcommand"},
        },
        "ratios": report.ratios(MEASUREMENTS, summary, 10e6, None),
    }
    text = report.table(results)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["reference", "prod", "MB/s"]
    kqp_row = next(line for line in lines if line.startswith("kqp "))
    assert kqp_row.split()[1] == "130"
    assert "tansu-proxy: unavailable: no proxy subcommand" in text
    assert "produce kqp/direct" in text and "0.733" in text



def test_table_of_a_run_where_nothing_was_measured_still_says_why() -> None:
    failed = [{"round": 0, "reference": "kqp", "workload": "spark-assign", "error": "run spark-produce too"}]
    results = {"summary": report.summarize(failed), "settings": {"rounds": 1},
               "references": {"kqp": {"status": "unavailable", "reason": "every cell failed"}},
               "ratios": report.ratios(failed, report.summarize(failed), 10e6, None)}
    text = report.table(results)
    assert text.splitlines()[0].strip() == "reference"
    assert "kqp: unavailable: every cell failed" in text

CPU_MEASUREMENTS = [
    _m(0, "relay", "produce", cpu_s_per_gb=1.0), _m(0, "relay", "consume", cpu_s_per_gb=0.5),
    _m(1, "relay", "produce", cpu_s_per_gb=2.0), _m(1, "relay", "consume", cpu_s_per_gb=1.0),
    _m(0, "kqp", "produce", cpu_s_per_gb=1.2), _m(0, "kqp", "consume", cpu_s_per_gb=0.6),
    _m(1, "kqp", "produce", cpu_s_per_gb=2.6), _m(1, "kqp", "consume", cpu_s_per_gb=1.1),
    _m(0, "kqp-metrics-quotas", "produce", cpu_s_per_gb=1.5),
    _m(1, "kqp-metrics-quotas", "produce", cpu_s_per_gb=2.8),
    _m(1, "kqp-metrics-quotas", "consume", cpu_s_per_gb=1.3),
    _m(0, "direct", "produce", mb_s=100.0),
]


def test_cpu_per_gb_of_every_proxy_is_set_beside_the_relays() -> None:
    summary = report.summarize(CPU_MEASUREMENTS)
    found = report.ratios(CPU_MEASUREMENTS, summary, 10e6, None)
    # Paired by round: kqp produce 1.2/1.0 = 1.2 and 2.6/2.0 = 1.3, median 1.25.
    assert found["produce cpu_s_per_gb kqp/relay"] == pytest.approx(1.25)
    assert found["consume cpu_s_per_gb kqp/relay"] == pytest.approx((1.2 + 1.1) / 2)
    # 1.5/1.0 and 2.8/2.0 = 1.4; consume only measured in round 1: 1.3/1.0.
    assert found["produce cpu_s_per_gb kqp-metrics-quotas/relay"] == pytest.approx(1.45)
    assert found["consume cpu_s_per_gb kqp-metrics-quotas/relay"] == pytest.approx(1.3)
    assert not any("direct/relay" in label or "relay/relay" in label for label in found)
    results = {"summary": summary, "ratios": found, "settings": {"rounds": 2},
               "references": {name: {"status": "ok"} for name in ("direct", "relay", "kqp", "kqp-metrics-quotas")}}
    lines = report.cpu_table(results)
    assert lines[0].split() == ["CPU", "s/GB", "produce", "consume"]
    assert [line.split()[0] for line in lines[1:]] == ["relay", "kqp", "kqp-metrics-quotas"]  # direct has none
    assert lines[1].split() == ["relay", "1.5", "0.75"]
    assert lines[3].split() == ["kqp-metrics-quotas", "2.15", "(1.45x", "relay)", "1.3", "(1.30x", "relay)"]
    assert "\n".join(lines) in report.table(results)


def test_a_baseline_build_is_set_beside_kqp_paired_by_round() -> None:
    measurements = [*CPU_MEASUREMENTS,
                    _m(0, "kqp-7f", "produce", cpu_s_per_gb=1.5), _m(0, "kqp-7f", "consume", cpu_s_per_gb=0.5),
                    _m(1, "kqp-7f", "produce", cpu_s_per_gb=2.0), _m(0, "kqp-7f", "latency", p99_ms=2.0),
                    _m(0, "kqp", "latency", p99_ms=1.5)]
    summary = report.summarize(measurements)
    found = report.ratios(measurements, summary, 10e6, None, baselines=["kqp-7f"])
    # Round 0: 1.2/1.5 = 0.8; round 1: 2.6/2.0 = 1.3; median 1.05 (not 1.9/1.75, medians of other rounds).
    assert found["produce cpu_s_per_gb kqp/kqp-7f"] == pytest.approx(1.05)
    assert found["consume cpu_s_per_gb kqp/kqp-7f"] == pytest.approx(1.2)   # round 0 only: 0.6/0.5
    assert found["latency p99_ms kqp/kqp-7f"] == pytest.approx(0.75)
    assert "produce mb_s kqp/kqp-7f" not in found   # never measured: left out
    # The baseline is a proxy like any other: its CPU per GB is set beside the relay's too.
    assert found["produce cpu_s_per_gb kqp-7f/relay"] == pytest.approx(1.25)   # 1.5/1.0, 2.0/2.0
    assert not any("kqp-7f" in label for label in report.ratios(measurements, summary, 10e6, None)
                   if "/relay" not in label)   # only when named a baseline


def test_percentile_is_nearest_rank() -> None:
    ordered = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(ordered, 50) == 50.0
    assert percentile(ordered, 99) == 99.0
    assert percentile(ordered, 100) == 100.0
    assert percentile([7.0], 99.9) == 7.0


def test_profile_summary_adds_samples_per_function(tmp_path: Path) -> None:
    profile = tmp_path / "profile.txt"
    checkout = profile_summary._CHECKOUT  # where kqp's folders are, e.g. /work/main/
    root = f"main ({checkout}proxy/cli.py:9);run (uvloop/loop.c:5)"
    profile.write_text(
        f"{root};feed ({checkout}protocol/frames.py:10) 30\n"
        f"{root};feed ({checkout}protocol/frames.py:12) 10\n"  # same function, another line
        f"{root};data_received ({checkout}proxy/session.py:40);write (libc.so.6) 40\n"
        f"{root};encode (/venv/site-packages/kafka/protocol/api_message.py:7) 20\n"
        f"{root};epoll_pwait (libc.so.6) 100\n"  # waiting in the poll, not working
        # an idle executor thread: py-spy names no wait at its innermost frame, the lock below says it
        "Thread.run (threading.py:982);_worker (concurrent/futures/thread.py:81);PyThread_acquire_lock_timed "
        "(libpython3.11.so.1.0);0x7fcab16a3f16 (libc.so.6) 1700\n"
    )
    text = profile_summary.summarize(profile, top=3)
    assert "100 samples working, 1800 waiting" in text
    areas, rest = text.split("self (on-CPU")
    assert " 40.0%  system calls and libc" in areas
    assert " 40.0%  kqp Python code" in areas
    assert " 20.0%  other Python code" in areas
    self_part, inclusive_part = rest.split("kqp functions, inclusive")
    assert " 40.0%  feed (protocol/frames.py)" in self_part  # lines 10 and 12 add up
    assert " 40.0%  data_received (proxy/session.py)" in inclusive_part
    assert "main (proxy/cli.py)" not in inclusive_part  # on every stack: no information


def test_exactly_once_counts_what_was_lost_read_twice_or_never_acknowledged() -> None:
    from array import array

    from kqp.proxy.bench.runner import exactly_once
    acked = array("Q", [1, 2, 3, 4])
    assert exactly_once(acked, array("Q", [4, 3, 2, 1])) == {"lost": 0, "duplicates": 0, "unacknowledged": 0}
    # 2 never read, 3 read twice, 9 read though its acknowledgement never came back.
    assert exactly_once(acked, array("Q", [1, 3, 3, 4, 9])) == {"lost": 1, "duplicates": 1, "unacknowledged": 1}


def test_the_group_reads_up_to_the_last_acknowledged_record_even_where_the_broker_lists_less() -> None:
    from kqp.proxy.bench.spark_like import reading_ends

    assert reading_ends({0: 30, 1: 45, 2: 0}, {0: 30, 1: 60}) == {0: 30, 1: 60, 2: 0}
    assert reading_ends({0: 30}, {0: 10, 3: 5}) == {0: 30, 3: 5}


def test_a_group_redelivery_is_not_a_duplicate_but_an_id_at_two_positions_is() -> None:
    from array import array

    from kqp.proxy.bench.runner import exactly_once
    from kqp.proxy.bench.spark_like import OFFSET_BITS, distinct_reads

    def at(partition: int, offset: int) -> int:
        return partition << OFFSET_BITS | offset

    # Partition 0's offset 1 is read twice (a rebalance before its commit); id 7 sits at two positions.
    positions = array("Q", [at(0, 0), at(0, 1), at(0, 1), at(1, 0), at(1, 1)])
    ids = array("Q", [5, 6, 6, 7, 7])
    taken, redelivered = distinct_reads(positions, ids)
    assert redelivered == 1
    assert sorted(taken) == [5, 6, 7, 7]
    assert exactly_once(array("Q", [5, 6, 7]), taken) == {"lost": 0, "duplicates": 1, "unacknowledged": 0}
    # Partition 1 and partition 0 at the same offset are different positions.
    assert distinct_reads(array("Q", [at(0, 3), at(1, 3)]), array("Q", [1, 2]))[1] == 0


def test_sizing_turns_cpu_per_gb_into_cores_per_100_mb_s() -> None:
    summary = {"direct": {"produce": {"mb_s": 100.0}},
               "kqp": {"spark-produce": {"cpu_s_per_gb": 4.0}, "idle": {"rss_per_connection_kb": 14.0},
                       "light": {"over_relay_p99_ms": 0.5}}}
    text = report.sizing({"summary": summary})
    # 4 CPU seconds per GB at 0.1 GB/s: 0.4 of a core; direct has nothing to size.
    assert "kqp: cores per 100 MB/s: spark-produce 0.400" in text and "per idle connection 14.0 KB" in text
    assert "light p99 over relay +0.50 ms" in text and "direct" not in text


def test_where_lost_says_where_the_unread_records_were_acknowledged_and_what_was_read_there() -> None:
    from array import array

    from kqp.proxy.bench.spark_like import OFFSET_BITS, where_lost

    def at(partition: int, offset: int) -> int:
        return partition << OFFSET_BITS | offset

    acked = array("Q", [10, 11, 12, 13])
    acked_at = array("Q", [at(0, 0), at(0, 1), at(1, 0), at(1, 1)])
    # 11 and 13 unread: 11's position was read holding 99 (acknowledged twice there), 13's never read.
    positions, ids = array("Q", [at(0, 0), at(0, 1), at(1, 0)]), array("Q", [10, 99, 12])
    assert where_lost({11, 13}, acked, acked_at, positions, ids) == ([at(0, 1), at(1, 1)], 1)
    assert where_lost(set(), acked, acked_at, positions, ids) == ([], 0)


def test_whole_runs_and_connections_are_set_beside_the_relays_with_set_up_included() -> None:
    measurements = [_m(0, "relay", "churn", cpu_us_per_connection=200.0, connections_s=900.0),
                    _m(1, "relay", "churn", cpu_us_per_connection=100.0, connections_s=1000.0),
                    _m(0, "kqp", "churn", cpu_us_per_connection=300.0, connections_s=800.0),
                    _m(1, "kqp", "churn", cpu_us_per_connection=180.0, connections_s=900.0),
                    _m(0, "relay", "spark-assign", cpu_s_per_gb=0.4, cpu_s_per_gb_whole=0.5),
                    _m(0, "kqp", "spark-assign", cpu_s_per_gb=0.5, cpu_s_per_gb_whole=0.6)]
    summary = report.summarize(measurements)
    found = report.ratios(measurements, summary, 10e6, None)
    # Paired by round: 300/200 = 1.5 and 180/100 = 1.8, median 1.65 (not 240/150 = 1.6).
    assert found["churn cpu_us_per_connection kqp/relay"] == pytest.approx(1.65)
    assert found["spark-assign cpu_s_per_gb_whole kqp/relay"] == pytest.approx(1.2)
    assert found["spark-assign cpu_s_per_gb kqp/relay"] == pytest.approx(1.25)
    results = {"summary": summary, "ratios": found, "settings": {"rounds": 2},
               "references": {name: {"status": "ok"} for name in ("relay", "kqp")}}
    lines = report.cpu_table(results, "whole run", report.WHOLE_RUN)
    assert lines[0].split() == ["whole", "run", "spark-assign", "churn"]
    assert lines[2].split() == ["kqp", "0.6", "(1.20x", "relay)", "240", "(1.65x", "relay)"]
    assert "\n".join(lines) in report.table(results)


def test_spark_plans_a_task_per_offset_range_and_leaves_no_offset_out() -> None:
    from kqp.proxy.bench.spark_like import offset_ranges

    # Partition 0's 10 records in two ranges, partition 1's 1 record in one (the other is empty), none of 2.
    assert offset_ranges({0: 10, 1: 1, 2: 0}, 2) == [(0, 0, 5), (0, 5, 10), (1, 0, 1)]
    ranges = offset_ranges({0: 1001, 1: 7}, 3)
    for partition, end in ((0, 1001), (1, 7)):
        mine = [(a, b) for p, a, b in ranges if p == partition]
        assert mine[0][0] == 0 and mine[-1][1] == end
        assert all(b == a2 for (_, b), (a2, _) in itertools.pairwise(mine))
