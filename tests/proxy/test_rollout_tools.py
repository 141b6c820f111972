"""`kqp recommend` and `kqp report` without a Prometheus: durations, rounding, which entity a
principal's figures go to, the texts they print, and every way the HTTP API can fail, each as one line.

The figures are the commands' own pure parts fed with what Prometheus's API returns (a matrix is a
list of {"metric": labels, "values": [[t, "v"], ...]}); the failures are real sockets: a closed
port, and a local HTTP server that is not Prometheus. The end-to-end test with a real Prometheus is
tests/e2e/test_rollout_prometheus.py.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from helpers.net import free_port

from kqp.config import quota_settings_from
from kqp.proxy.tools.prometheus_api import Prometheus, PrometheusError, format_duration, parse_duration
from kqp.proxy.tools.recommend import Observed, Proposal, _series, nice, quantile, render
from kqp.proxy.tools.report import Report, Row
from kqp.proxy.tools.report import render as report_render
from kqp.proxy.tools.usage_history import Entities, Period
from kqp.quotas.model import Principal, QuotaKey

PERIOD = Period(Prometheus("http://prom:9090"), 120.0, "2m", 1_700_000_000.0, 1.0)
BYTES = "producer_byte_rate"


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("2m", 120), ("1h30m", 5400), ("500ms", 0.5),
                                               ("7d", 604800), ("1w2d", 777600)])
def test_durations_are_read_as_prometheus_writes_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds   # what the range selectors are given


@pytest.mark.parametrize("text", ["2x", "", "1.5h", "30m1h", "5m5m", "0s", "2 m", "-2m", "m"])
def test_a_bad_duration_says_how_to_write_one(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration") as caught:
        parse_duration(text)
    assert "\n" not in str(caught.value)


def test_proposals_round_up_to_two_significant_digits_from_the_quantile() -> None:
    assert [nice(v) for v in (61_234, 50_000, 1.234, 0.0123, 999)] == [62_000, 50_000, 1.3, 0.013, 1000]
    # numpy's linear interpolation: the 0.95 quantile of 0..100 is 95, of [10, 20] is 19.5.
    assert quantile([float(v) for v in range(101)], 0.95) == 95 and quantile([10.0, 20.0], 0.95) == 19.5


def test_a_principals_figures_go_to_the_entity_it_is_measured_as() -> None:
    settings = quota_settings_from({"entities": [{"client_id_prefix": "etl-", BYTES: 1000},
                                                 {"user": "alice", BYTES: 5000}]})
    anonymous, alice, bob = Principal("ANONYMOUS", "etl-a"), Principal("alice", "x"), Principal("bob", "y")
    configured = Entities(settings)
    assert configured.key(anonymous, BYTES) == QuotaKey("", "", "etl-")      # its group, as the config says
    assert configured.key(alice, BYTES) == QuotaKey("alice", "")             # all alice's clients: one sensor
    assert configured.key(bob, BYTES) == QuotaKey("bob", "y")                # unconfigured: itself
    reported = Entities(groups={(BYTES, "ANONYMOUS", "etl-a"): QuotaKey("", "", "etl-")})
    assert reported.key(anonymous, BYTES) == QuotaKey("", "", "etl-")       # kqp reported it in the group
    assert reported.key(anonymous, "consumer_byte_rate") == QuotaKey("", "etl-a")   # /clients/etl-a


def test_a_group_is_summed_from_its_members_once_each() -> None:
    """etl-a and etl-b at 100 and 74 B/s: the group's figure is 174 B/s, not each member's shared one."""
    found = [{"metric": {"user": "ANONYMOUS", "client_id": c}, "values": [[1.0, str(v)], [2.0, str(v)]]}
             for c, v in (("etl-a", 100), ("etl-b", 74), ("solo", 5))]
    entities = Entities(quota_settings_from({"entities": [{"client_id_prefix": "etl-", BYTES: 1000}]}))
    series = _series(found, entities, BYTES)
    points, members = series[QuotaKey("", "", "etl-")]
    assert points == {1.0: 174.0, 2.0: 174.0} and [m.client_id for m in members] == ["etl-a", "etl-b"]
    assert series[QuotaKey("", "solo")][0] == {1.0: 5.0, 2.0: 5.0}


def proposal(key: QuotaKey, value: float, *members: Principal) -> Proposal:
    return Proposal(key, BYTES, Observed(value / 1.2, value / 1.1, value / 1.3, 60), value, list(members))


def test_the_recommendation_is_yaml_to_paste_and_marks_each_change_against_the_config() -> None:
    settings = quota_settings_from({"entities": [
        {"client_id": "steady-100", BYTES: 100_000, "request_rate": 50, "mode": "observe"},
        {"client_id": "<default>", BYTES: 1_000_000},
        {"client_id": "gone", BYTES: 7},
    ]})
    proposals = [proposal(QuotaKey("", "steady-100"), 130_000, Principal("ANONYMOUS", "steady-100")),
                 proposal(QuotaKey("", "new-one"), 61_000, Principal("ANONYMOUS", "new-one")),
                 proposal(QuotaKey("", "", "etl-"), 250_000, Principal("ANONYMOUS", "etl-a"))]
    text = render(proposals, PERIOD, 0.95, 1.2, 11.0, settings)
    entries = yaml.safe_load(text)
    # The configured entity's entry keeps its other keys (it replaces that entry when pasted).
    assert entries == [{"client_id": "steady-100", "mode": "observe", BYTES: 130_000, "request_rate": 50},
                       {"client_id": "new-one", BYTES: 61_000}, {"client_id_prefix": "etl-", BYTES: 250_000}]
    lines = text.splitlines()
    assert any("was 100000 (+30%)" in line for line in lines)
    assert any("client_id: new-one" in prev and "was 1000000 from /clients/<default> (-94%)" in line
               for prev, line in itertools.pairwise(lines))
    assert any("etl-" in prev and "new" in line for prev, line in itertools.pairwise(lines))
    assert lines[-1] == "# configured, no traffic in the period (left as they are): /clients/gone"
    assert yaml.safe_load(render([], PERIOD, 0.95, 1.2, 11.0)) == []


def report() -> Report:
    rows = [Row("ANONYMOUS", "etl-a", None, 1000, 0, 10, 1.5, 0),
            Row("ANONYMOUS", "etl-b", None, 500, 2000, 5, 0, 2.25), Row("alice", "solo", None, 3_000_000, 0, 1, 0, 0)]
    subtotal = Row("", "etl-*", None, 1500, 2000, 15, 1.5, 2.25)
    return Report(PERIOD, rows, [("etl-*", [subtotal, rows[0], rows[1]])], False)


def test_the_csv_has_exactly_the_columns_asked_for_and_adds_up() -> None:
    rows = list(csv.reader(io.StringIO(report_render(report(), "csv"))))
    assert rows[0] == ["user", "client_id", "produced_bytes", "fetched_bytes", "requests", "throttled_seconds",
                       "observed_muted_seconds"]
    assert rows[1] == ["ANONYMOUS", "etl-a", "1000", "0", "10", "1.500", "0.000"]
    assert len(rows) == 4, "members only: a group's subtotal would count its members twice"
    assert sum(int(r[2]) for r in rows[1:]) == 3_001_500


def test_the_table_and_json_label_group_subtotals_apart() -> None:
    table = report_render(report(), "table")
    assert "TOTAL" in table and "3.00 MB" in table
    assert "Prefix groups: each one's subtotal, then its members (counted once above already)" in table
    assert any(line.startswith("etl-*") and "(subtotal)" in line and "1.50 kB" in line for line in table.splitlines())
    doc = json.loads(report_render(report(), "json"))
    assert doc["total"]["produced_bytes"] == 3_001_500 and len(doc["rows"]) == 3
    assert doc["groups"] == [{"group": "etl-*", "produced_bytes": 1500, "fetched_bytes": 2000, "requests": 15,
                              "throttled_seconds": 1.5, "observed_muted_seconds": 2.25,
                              "members": [{"user": "ANONYMOUS", "client_id": "etl-a"},
                                          {"user": "ANONYMOUS", "client_id": "etl-b"}]}]


class NotPrometheus(BaseHTTPRequestHandler):
    answers: dict[str, tuple[int, bytes]] = {}

    def do_GET(self) -> None:
        code, body = self.answers.get(self.path.split("?")[0], (404, b"404 page not found"))
        self.send_response(code)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def server(answers: dict[str, tuple[int, bytes]]) -> Iterator[str]:
    handler = type("Answers", (NotPrometheus,), {"answers": answers})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.mark.parametrize(("answers", "says"), [
    ({}, "did not answer as Prometheus's HTTP API (HTTP 404 for /api/v1/query): check --prometheus"),
    ({"/api/v1/query": (200, b"<html>")}, "did not answer as Prometheus's HTTP API (no JSON from /api/v1/query)"),
    ({"/api/v1/query": (400, b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}')},
     "refused a query: parse error at char 3"),
])
def test_a_server_that_is_not_prometheus_is_one_line(answers: dict[str, tuple[int, bytes]], says: str) -> None:
    with server(answers) as url, pytest.raises(PrometheusError) as caught:
        Prometheus(url, timeout=5).query("kqp_entities", 0.0)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_an_unreachable_prometheus_is_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PrometheusError) as caught:
        Prometheus(url, timeout=5).query("kqp_entities", 0.0)
    assert str(caught.value).startswith(f"cannot reach Prometheus at {url} (") and "check --prometheus" in str(
        caught.value)
