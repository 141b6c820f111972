"""`kqp recommend` and `kqp report` against a real Prometheus that scraped kqp every second.

Three confluent-kafka producers send 10 kB records through kqp at 50, 100 and 200 kB/s for a minute
(`helpers.steady_producer`, paced); a Prometheus (`helpers.prometheus_server`) scrapes kqp's metrics
endpoint every second, in two jobs (each kqp must still count once). Then the commands run as users
run them (`kqp ...` in a subprocess): `recommend --since 2m --config` proposes each client id a
producer_byte_rate between 1.0 and 2.5 x the rate it sent at (0.95 quantile x 1.2 headroom: about
1.2 x for a steady rate), as YAML that parses, and marks the one client id the config already limits
(an observed 100 kB/s) with its old value; `report --since 2m --format csv` gives each client id's
produced bytes within 20 % of the record bytes it sent (kqp counts whole Produce frames: a few per
cent more), and `--by topic` (kqp's `metrics.topic_bytes` on) splits them per topic. Once kqp is
gone and the range holds none of its samples, both commands say so in one line and exit 1.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import pytest
import yaml
from helpers.kqp_process import run_kqp_cli as kqp_cli
from helpers.net import split_host_port
from helpers.observability import metrics_url
from helpers.prometheus_server import prometheus, query
from helpers.steady_producer import SteadyProducer

pytestmark = pytest.mark.e2e

RATES = {"steady-50": 50_000, "steady-100": 100_000, "steady-200": 200_000}
SECONDS = 60.0


def test_recommend_and_report_read_a_minute_of_traffic_from_prometheus(mock_cluster, kqp, tmp_path: Path) -> None:
    quotas = {"entities": [{"client_id": "steady-100", "producer_byte_rate": 100_000, "mode": "observe"}]}
    proxy = kqp(mock_cluster, quotas, metrics={"listen": "127.0.0.1:0", "topic_bytes": True})
    host, port = split_host_port(metrics_url(proxy).removeprefix("http://"))
    with prometheus(tmp_path, [f"{host}:{port}"], twice=True) as prom:
        deadline = time.monotonic() + 10
        while not query(prom, 'up{job="kqp"} == 1'):   # kqp scraped before the first byte: all of it is seen
            assert time.monotonic() < deadline, "prometheus never scraped kqp"
            time.sleep(0.2)
        producers = {client: SteadyProducer(proxy.bootstrap, mock_cluster.kind, client, rate=rate,
                                            **{"linger.ms": 20})
                     for client, rate in RATES.items()}
        started = time.monotonic()
        for producer in producers.values():
            producer.__enter__()
        try:
            time.sleep(max(0.0, SECONDS - (time.monotonic() - started)))
        finally:
            for producer in producers.values():
                producer.stop()
        sent = {client: p.sent_bytes for client, p in producers.items()}
        rates = {client: p.sent_bytes / (p.stopped_at - p.started_at) for client, p in producers.items()}
        time.sleep(2.5)   # two more scrapes: the counters' last values are in Prometheus

        recommended = kqp_cli("recommend", "--prometheus", prom, "--since", "2m", "--config", str(proxy.config_path))
        assert recommended.returncode == 0, recommended.stderr
        entries = yaml.safe_load(recommended.stdout)
        proposals = {e["client_id"]: e for e in entries if "client_id" in e}
        for client, rate in rates.items():
            proposed = proposals[client]["producer_byte_rate"]
            assert 1.0 * rate <= proposed <= 2.5 * rate, f"{client}: proposed {proposed} for {rate:.0f} B/s"
        assert proposals["steady-100"]["mode"] == "observe", "the entry replaces its own: its other keys kept"
        [line] = [x for x in recommended.stdout.splitlines() if "producer_byte_rate" in x and "was 100000" in x]
        assert "observed 95th percentile" in line
        assert sum("; new" in x for x in recommended.stdout.splitlines()) == 2, recommended.stdout

        reported = kqp_cli("report", "--prometheus", prom, "--since", "2m", "--format", "csv")
        assert reported.returncode == 0, reported.stderr
        rows = list(csv.DictReader(io.StringIO(reported.stdout)))
        assert list(rows[0]) == ["user", "client_id", "produced_bytes", "fetched_bytes", "requests",
                                 "throttled_seconds", "observed_muted_seconds"]
        produced = {r["client_id"]: int(r["produced_bytes"]) for r in rows}
        for client, bytes_sent in sent.items():
            assert abs(produced[client] - bytes_sent) <= 0.2 * bytes_sent, \
                f"{client}: reported {produced[client]} of {bytes_sent} sent"
        # Per topic: each client id's one topic carries its record bytes; the frames' overhead (a few
        # per cent) stays on the row with no topic, with the requests, which are no topic's.
        split = kqp_cli("report", "--prometheus", prom, "--since", "2m", "--format", "csv", "--by", "topic")
        assert split.returncode == 0, split.stderr
        topics = list(csv.DictReader(io.StringIO(split.stdout)))
        assert list(topics[0])[:3] == ["user", "client_id", "topic"]
        for client, bytes_sent in sent.items():
            mine = {r["topic"]: r for r in topics if r["client_id"] == client}
            assert set(mine) == {"", producers[client].topic}
            records, rest = int(mine[producers[client].topic]["produced_bytes"]), int(mine[""]["produced_bytes"])
            assert abs(records - bytes_sent) <= 0.2 * bytes_sent and rest <= 0.1 * (records + rest)
            assert int(mine[""]["requests"]) > 0 and mine[producers[client].topic]["requests"] == "0"

        print(f"sent {sent} at {rates} B/s; reported {produced}; proposed "
              f"{ {c: proposals[c]['producer_byte_rate'] for c in sent} }")

        proxy.stop()
        time.sleep(3.0)   # failed scrapes only: the last 2 s hold no kqp sample
        for command in (("recommend",), ("report", "--format", "table")):
            empty = kqp_cli(*command, "--prometheus", prom, "--since", "2s")
            assert empty.returncode == 1 and empty.stdout == ""
            assert empty.stderr.strip() == (f"no kqp samples in the last 2s on {prom} (kqp was scraped before that): "
                                            "choose a longer --since, or check that Prometheus still scrapes kqp")


def test_a_prometheus_that_does_not_scrape_kqp_and_a_bad_duration_are_one_line_each(tmp_path: Path) -> None:
    with prometheus(tmp_path, []) as prom:
        for command in (("recommend",), ("report", "--format", "csv")):
            answer = kqp_cli(*command, "--prometheus", prom, "--since", "1h")
            assert (answer.returncode, answer.stdout) == (1, "")
            assert answer.stderr == (f"Prometheus at {prom} has no kqp series (kqp_entities): it does not scrape kqp; "
                                     "add kqp's metrics endpoint (metrics.listen) to its scrape targets (README, "
                                     "Rolling out quotas)\n")
            bad = kqp_cli(*command, "--prometheus", prom, "--since", "1.5h")
            assert (bad.returncode, bad.stdout) == (2, "")
            assert bad.stderr == ("--since: '1.5h' is not a duration: write it as Prometheus does, e.g. 90s, 2m, "
                                  "1h30m, 7d\n")
