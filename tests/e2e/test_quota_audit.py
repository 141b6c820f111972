"""The audit trail of quota changes, end to end: a running kqp (`--log-format json`, its metrics endpoint
on), kafka-python's connection manager altering a quota through kqp's admin API, the config file
reloaded, kqp restarted.

Each change must show up three ways: a `kqp.audit` JSON log line with who, source, entity, before and
after as fields; `kqp_quota_changes_total{source}` on /metrics; and the history beside the state
file, read back by `kqp quotas history` after a restart. The upstream is librdkafka's mock cluster,
which knows neither quota API: kqp answers them itself.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.kqp_process import KqpProcess, rewrite_config, run_kqp_cli
from helpers.observability import metrics_url, sample, scrape
from kafka.protocol.admin import AlterClientQuotasRequest as Alter

pytestmark = pytest.mark.e2e

BASE = {"entities": [{"user": "alice", "producer_byte_rate": 1000, "consumer_byte_rate": 5000}]}
RELOADED = {"entities": [{"user": "alice", "producer_byte_rate": 1000, "consumer_byte_rate": 6000}]}
FIELDS = ("who", "source", "entity", "before", "after")


def audit_lines(process: KqpProcess) -> list[dict[str, Any]]:
    """The `kqp.audit` events kqp logged, as their JSON fields."""
    events = []
    for line in process.log_lines():
        if line.startswith("{") and '"logger": "kqp.audit"' in line:
            record = json.loads(line)
            events.append({key: record[key] for key in FIELDS})
    return events


def wait_for_events(process: KqpProcess, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(events := audit_lines(process)) < count:
        assert time.monotonic() < deadline, f"{len(events)} audit event(s), wanted {count}:\n{process.logs()[-3000:]}"
        time.sleep(0.05)   # a test's poll, bounded by the deadline
    return events


def history(config: Path, want: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    """`kqp quotas history --json`, once it holds `want` events (a reload's is appended off the loop)."""
    deadline = time.monotonic() + timeout
    while True:
        done = run_kqp_cli("quotas", "history", "--config", str(config), "--json")
        assert done.returncode == 0, done.stderr
        events = json.loads(done.stdout)
        if len(events) >= want or time.monotonic() > deadline:
            return events
        time.sleep(0.1)


def alter(bootstrap: str, value: float, validate_only: bool = False) -> None:
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        manager = client._manager   # no Python client has a public quota API: kafka-python's own requests
        entry = Alter.EntryData(entity=[Alter.EntryData.EntityData(entity_type="user", entity_name="alice")],
                                ops=[Alter.EntryData.OpData(key="producer_byte_rate", value=value, remove=False)])
        answer = manager.run(manager.send, Alter(entries=[entry], validate_only=validate_only))
        assert [(e.error_code, e.error_message) for e in answer.entries] == [(0, None)]
    finally:
        client.close()


def test_an_alter_a_reload_and_a_restart_are_logged_counted_and_kept(kqp: Any, mock_cluster: str,
                                                                     tmp_path: Path) -> None:
    admin = {"manage_quotas": True, "principals": ["User:ANONYMOUS"], "state_file": str(tmp_path / "state.yaml")}
    settings = {"admin": admin, "metrics": {"listen": "127.0.0.1:0"}, "extra_args": ["--log-format", "json"]}
    process = kqp(mock_cluster, BASE, **settings)
    url = metrics_url(process)
    assert audit_lines(process) == []   # an empty state file changes nothing at start

    alter(process.bootstrap, 9999, validate_only=True)   # changes nothing: no event
    alter(process.bootstrap, 2048)
    admin_event = {"who": "User:ANONYMOUS", "source": "admin_api", "entity": "/users/alice",
                   "before": {"producer_byte_rate": 1000.0, "consumer_byte_rate": 5000.0},
                   "after": {"producer_byte_rate": 2048.0, "consumer_byte_rate": 5000.0}}
    assert wait_for_events(process, 1) == [admin_event]

    rewrite_config(process.config_path, process.config, quotas=RELOADED)
    reload_event = {"who": None, "source": "reload", "entity": "/users/alice",
                    "before": {"producer_byte_rate": 2048.0, "consumer_byte_rate": 5000.0},   # the API's 2048 stays
                    "after": {"producer_byte_rate": 2048.0, "consumer_byte_rate": 6000.0}}
    assert wait_for_events(process, 2) == [admin_event, reload_event]
    samples = scrape(url)
    assert [sample(samples, "kqp_quota_changes_total", source=s) for s in ("admin_api", "reload", "state_file")] == [
        1.0, 1.0, 0.0]
    kept = history(process.config_path, 2)
    assert [{key: event[key] for key in FIELDS} for event in kept] == [admin_event, reload_event]
    assert all(event["ts"].endswith("Z") for event in kept)
    assert process.stop() == 0

    # A restart on the reloaded config: the state file's 2048 is put in force over the file's 1000
    # (one state_file event), and the history is still there.
    again = kqp(mock_cluster, RELOADED, **settings)
    assert wait_for_events(again, 1) == [{"who": None, "source": "state_file", "entity": "/users/alice",
                                          "before": {"producer_byte_rate": 1000.0, "consumer_byte_rate": 6000.0},
                                          "after": {"producer_byte_rate": 2048.0, "consumer_byte_rate": 6000.0}}]
    assert [{key: event[key] for key in FIELDS} for event in history(again.config_path, 2)] == [
        admin_event, reload_event]
    table = run_kqp_cli("quotas", "history", "--config", str(again.config_path), "--last", "1")
    rows = [line.split() for line in table.stdout.splitlines()]
    assert rows[0] == ["TS", "WHO", "SOURCE", "ENTITY", "BEFORE", "AFTER"]
    assert rows[1][1:] == ["-", "reload", "/users/alice", "producer_byte_rate=2048,consumer_byte_rate=5000",
                           "producer_byte_rate=2048,consumer_byte_rate=6000"]
