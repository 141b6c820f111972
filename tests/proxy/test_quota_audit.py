"""The audit trail of quota changes: one structured event per entity changed, counted, and kept in the
history beside the state file (bounded, shared by processes, readable after a restart).

Real files in a temporary directory and a real quota manager, as tests/proxy/test_quota_store.py;
the wall clock is injected (`WALL`), so every event's `ts` is known. The end-to-end path (a real
client's AlterClientQuotas, a reload of a running kqp, a restart) is tests/e2e/test_quota_audit.py's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kqp.proxy.observability.quota_audit import QuotaAudit, utc_stamp
from kqp.proxy.runtime.state import history as quota_history
from kqp.proxy.runtime.state.history import history_path, read_history
from kqp.proxy.runtime.state.quota_store import QuotaStore
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import EntitySpec, QuotaSettings

ALICE, BOB = EntitySpec("alice", None), EntitySpec("bob", None)
BASE = QuotaSettings(entities={ALICE: {"producer_byte_rate": 1000.0, "consumer_byte_rate": 5000.0}})
WALL = 1_795_000_000.25   # 2026-11-18T11:06:40.250Z (datetime.fromtimestamp(WALL, UTC))
TS = "2026-11-18T11:06:40.250Z"


def store_at(path: Path, base: QuotaSettings = BASE) -> tuple[QuotaStore, QuotaManager]:
    managers: list[QuotaManager] = []
    store = QuotaStore(str(path), base, lambda settings: managers[0].update_settings(settings, 0.0),
                       QuotaAudit(lambda: WALL))
    managers.append(QuotaManager(store.effective, 0.0))   # as the server: the state file in force from the start
    return store, managers[0]


def commit_now(store: QuotaStore, changes: list, who: str) -> None:
    async def run() -> None:
        await store.commit(changes, who, asyncio.get_running_loop())
    asyncio.run(run())


def history(path: Path) -> list[dict[str, Any]]:
    events, bad = read_history(str(path))
    assert bad == 0
    return events


def audit_records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The structured fields of each `kqp.audit` line, as `--log-format json` writes them."""
    return [{key: getattr(r, key) for key in ("who", "source", "entity", "before", "after")}
            for r in caplog.records if r.name == "kqp.audit"]


def test_the_stamp_is_the_json_log_s_format() -> None:
    assert utc_stamp(WALL) == TS


def test_an_admin_change_is_one_event_per_entity_logged_counted_and_kept(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.yaml"
    store, _ = store_at(path)
    with caplog.at_level(logging.INFO, logger="kqp.audit"):
        commit_now(store, [(ALICE, {"consumer_byte_rate": None}), (BOB, {"request_rate": 3.0})], "User:ops")
    alice = {"who": "User:ops", "source": "admin_api", "entity": "/users/alice",
             "before": {"producer_byte_rate": 1000.0, "consumer_byte_rate": 5000.0},
             "after": {"producer_byte_rate": 1000.0}}
    bob = {"who": "User:ops", "source": "admin_api", "entity": "/users/bob", "before": {},
           "after": {"request_rate": 3.0}}
    assert audit_records(caplog) == [alice, bob]
    assert ('quota audit: admin_api by User:ops: /users/bob none -> {"request_rate":3.0}'
            in [r.getMessage() for r in caplog.records])
    assert history(path) == [{"ts": TS, **alice}, {"ts": TS, **bob}]
    assert store.audit.counts == {"admin_api": 2, "reload": 0, "state_file": 0}
    # Asking for what is already in force changes nothing in force: no event, nothing appended.
    commit_now(store, [(BOB, {"request_rate": 3.0})], "User:ops")
    assert len(history(path)) == 2 and store.audit.counts["admin_api"] == 2


def test_a_reload_is_audited_and_appended_once_by_processes_sharing_the_file(tmp_path: Path,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.yaml"
    first, _ = store_at(path)
    second, _ = store_at(path)   # another worker reading the same config file and state file
    commit_now(first, [(ALICE, {"producer_byte_rate": 2048.0})], "User:ops")
    asyncio.run(second.refresh())
    new_base = QuotaSettings(entities={ALICE: {"producer_byte_rate": 10.0, "consumer_byte_rate": 7000.0}})
    with caplog.at_level(logging.INFO, logger="kqp.audit"):
        for store in (first, second):
            store.rebase(new_base)
            store.close(wait=True)   # the reload's append runs in the store's thread
    # The state file's 2048 still wins over the file's 10; the consumer quota is the config file's.
    reload = {"who": None, "source": "reload", "entity": "/users/alice",
              "before": {"producer_byte_rate": 2048.0, "consumer_byte_rate": 5000.0},
              "after": {"producer_byte_rate": 2048.0, "consumer_byte_rate": 7000.0}}
    assert audit_records(caplog) == [reload, reload]   # each process logs and counts what it put in force
    assert [event["source"] for event in history(path)] == ["admin_api", "reload"]   # kept once
    assert history(path)[-1] == {"ts": TS, **reload}
    # The same change again later (the file changed back, then forth) is a new change: kept.
    first.rebase(BASE)
    first.rebase(new_base)
    first.close(wait=True)
    assert [event["source"] for event in history(path)] == ["admin_api", "reload", "reload", "reload"]


def test_a_change_read_from_the_file_is_audited_as_state_file_but_not_appended(tmp_path: Path,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.yaml"
    writer, _ = store_at(path)
    reader, _ = store_at(path)
    commit_now(writer, [(BOB, {"request_rate": 3.0})], "User:ops")
    with caplog.at_level(logging.INFO, logger="kqp.audit"):
        asyncio.run(reader.refresh())   # another process wrote it: its commit already went into the history
    assert audit_records(caplog) == [{"who": None, "source": "state_file", "entity": "/users/bob", "before": {},
                                      "after": {"request_rate": 3.0}}]
    assert reader.audit.counts == {"admin_api": 0, "reload": 0, "state_file": 1}
    assert [event["source"] for event in history(path)] == ["admin_api"]


def test_the_history_keeps_the_last_events_and_survives_bad_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(quota_history, "HISTORY_LIMIT", 3)
    path = tmp_path / "state.yaml"
    store, _ = store_at(path)
    for n in range(1, 6):
        commit_now(store, [(BOB, {"request_rate": float(n)})], "User:ops")
    assert [event["after"] for event in history(path)] == [{"request_rate": n} for n in (3.0, 4.0, 5.0)]
    # A torn or hand-made line hides nothing else: read past, dropped (and said) at the next append.
    with open(history_path(str(path)), "a") as out:
        out.write('{"ts": "torn\n[1, 2]\n')
    assert read_history(str(path))[1] == 2
    with caplog.at_level(logging.WARNING, logger="kqp.admin"):
        commit_now(store, [(BOB, {"request_rate": 6.0})], "User:ops")
    assert "2 unreadable line(s) dropped" in caplog.text
    assert [event["after"]["request_rate"] for event in history(path)] == [4.0, 5.0, 6.0]


def test_a_history_that_cannot_be_written_fails_no_change(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.yaml"
    Path(history_path(str(path))).mkdir()   # not a file: reading and replacing it fail
    store, manager = store_at(path)
    with caplog.at_level(logging.ERROR, logger="kqp.admin"):
        commit_now(store, [(BOB, {"request_rate": 3.0})], "User:ops")
    assert manager.settings.entities[BOB]["request_rate"] == 3.0   # durable and in force all the same
    assert "quota history beside" in caplog.text and "1 event(s) only in the log" in caplog.text


def test_a_state_file_from_before_the_history_loads_and_its_history_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    path.write_text("entities:\n- {user: bob, request_rate: 3.0}\n")   # what kqp wrote before the audit trail
    store, manager = store_at(path)
    assert manager.settings.entities[BOB]["request_rate"] == 3.0 and history(path) == []
    commit_now(store, [(BOB, {"request_rate": 4.0})], "User:ops")
    assert [event["before"] for event in history(path)] == [{"request_rate": 3.0}]
    assert path.read_text().count("entities:") == 1 and "history" not in path.read_text()   # format unchanged


def test_the_metric_counts_every_source_from_zero() -> None:
    audit = QuotaAudit(lambda: WALL)
    audit.record(BASE, QuotaSettings(), None, "reload")   # alice's quotas removed: one entity, one change
    registry = CollectorRegistry()
    registry.register(audit)
    samples = {s.labels["source"]: s.value for metric in registry.collect() for s in metric.samples
               if s.name == "kqp_quota_changes_total"}
    assert samples == {"admin_api": 0, "reload": 1, "state_file": 0}


def test_the_events_are_json() -> None:
    events = QuotaAudit(lambda: WALL).events(BASE, QuotaSettings(), "User:ops", "admin_api")
    assert json.loads(json.dumps(events)) == events
