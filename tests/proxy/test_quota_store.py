"""The admin state file: written atomically, read back at a restart, shared by processes, never dropped.

Real files in a temporary directory and a real quota manager; no event loop (the watch is the
same `refresh` these tests call), but for the one test of the watch task itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest
import yaml

from kqp.config.errors import ConfigError
from kqp.proxy.policies.quota_admin import CommitFailed
from kqp.proxy.runtime.quota_store import QuotaStore, read_state
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import EntitySpec, Principal, QuotaSettings

ALICE, BOB = EntitySpec("alice", None), EntitySpec("bob", None)
BASE = QuotaSettings(entities={ALICE: {"producer_byte_rate": 1000.0, "consumer_byte_rate": 5000.0}})


def store_at(path: Path, base: QuotaSettings = BASE) -> tuple[QuotaStore, QuotaManager]:
    manager = QuotaManager(base, 0.0)
    store = QuotaStore(str(path), base, lambda settings: manager.update_settings(settings, 0.0))
    store.rebase(base)
    return store, manager


def test_a_commit_is_in_force_at_once_and_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    store, manager = store_at(path)
    store.commit([(ALICE, {"producer_byte_rate": 2048.0, "consumer_byte_rate": None}), (BOB, {"request_rate": 3.0})],
                 "User:ops")
    expected = {ALICE: {"producer_byte_rate": 2048.0}, BOB: {"request_rate": 3.0}}
    assert {e: dict(v) for e, v in manager.settings.entities.items()} == expected
    # The file says it in plain YAML, the removal as null, and no temporary file is left behind.
    assert yaml.safe_load(path.read_text())["entities"] == [
        {"user": "alice", "consumer_byte_rate": None, "producer_byte_rate": 2048.0},
        {"user": "bob", "request_rate": 3.0}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.yaml", "state.yaml.lock"]
    _, restarted = store_at(path)   # a restart: the same base, the file read back
    assert {e: dict(v) for e, v in restarted.settings.entities.items()} == expected


def test_a_config_reload_keeps_the_admin_layer_over_the_new_base(tmp_path: Path) -> None:
    store, manager = store_at(tmp_path / "state.yaml")
    store.commit([(ALICE, {"producer_byte_rate": 2048.0})], "User:ops")
    store.rebase(QuotaSettings(entities={ALICE: {"producer_byte_rate": 10.0, "request_rate": 9.0}}))
    assert dict(manager.settings.entities[ALICE]) == {"producer_byte_rate": 2048.0, "request_rate": 9.0}


def test_a_corrupt_state_file_stops_the_start_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    path.write_text("entities:\n- {user: alice, producer_byte_rate: lots}\n")
    with pytest.raises(ConfigError) as info:
        store_at(path)
    assert str(info.value) == (f"config error in {path}: entities[0].producer_byte_rate: admin state file: must be "
                               f"a number > 0, or null (removed), got 'lots'")
    path.write_text("entities: [\n")
    with pytest.raises(ConfigError, match=rf"config error in {path}: invalid YAML at line 2"):
        store_at(path)


def test_a_missing_directory_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"admin\.state_file: kqp cannot write in the directory"):
        store_at(tmp_path / "nowhere" / "state.yaml")


def test_a_state_file_that_went_bad_refuses_the_change_and_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    store, manager = store_at(path)
    store.commit([(BOB, {"request_rate": 3.0})], "User:ops")
    path.write_text("entities: 7\n")   # someone broke it by hand
    with pytest.raises(CommitFailed, match="admin state file: must be a list"):
        store.commit([(ALICE, {"producer_byte_rate": 1.0})], "User:ops")
    assert path.read_text() == "entities: 7\n"   # not overwritten: what it held is not lost
    assert dict(manager.settings.entities[ALICE])["producer_byte_rate"] == 1000.0


def test_processes_sharing_the_file_see_and_keep_each_other_s_changes(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.yaml"
    first, first_quotas = store_at(path)
    second, second_quotas = store_at(path)   # another worker, or an instance on the same volume
    first.commit([(ALICE, {"producer_byte_rate": 2048.0})], "User:ops")
    second.refresh()   # what its watch does when the file's stat changes
    assert second_quotas.settings.entities[ALICE]["producer_byte_rate"] == 2048.0
    second.commit([(BOB, {"request_rate": 3.0})], "User:ops")   # re-read under the lock: alice's change stays
    assert set(read_state(str(path))) == {ALICE, BOB}
    first.refresh()
    assert first_quotas.settings.entities[BOB]["request_rate"] == 3.0
    # A file broken on disk is not taken: the quotas in force stay, and the log says why.
    path.write_text("entities: [{user: 3}]\n")
    with caplog.at_level(logging.ERROR, logger="kqp.admin"):
        first.refresh()
    assert first_quotas.settings.entities[BOB]["request_rate"] == 3.0
    assert "does not load; keeping the quotas in force" in caplog.text and str(path) in caplog.text


def test_the_write_is_a_rename_over_the_file(tmp_path: Path) -> None:
    # Atomic: readers see the old file or the new one, never a half-written one; the old inode stays whole.
    path = tmp_path / "state.yaml"
    store, _ = store_at(path)
    store.commit([(BOB, {"request_rate": 3.0})], "User:ops")
    before = os.stat(path).st_ino
    with open(path) as old:
        store.commit([(BOB, {"request_rate": 4.0})], "User:ops")
        assert "request_rate: 3.0" in old.read()
    assert os.stat(path).st_ino != before


def test_an_admin_change_keeps_what_was_measured_as_a_reload_does(tmp_path: Path) -> None:
    # alice produced 5000 bytes at t=0 under her config-file quota of 1000 B/s; the API lowers it to
    # 500 B/s. The sensor is the same one (a reload's path): its 5000 bytes still count, at the new limit.
    store, manager = store_at(tmp_path / "state.yaml")
    alice = Principal("alice", "app")
    manager.record_produce(alice, 5000, 1, 1, 0.0)
    store.commit([(ALICE, {"producer_byte_rate": 500.0})], "User:ops")
    [state] = [s for s in manager.snapshot(0.5) if s.quota_type == "producer_byte_rate"]
    # Kafka's Rate at t=0.5: 5000 bytes over (11 - 1) whole windows of 1 s plus the current 0.5 s.
    assert (state.limit, state.rate) == (500.0, pytest.approx(5000 / 10.5))


async def test_the_watch_outlives_a_change_it_failed_to_apply(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    # The quota manager raises on the first change seen on disk: the watch logs it and keeps
    # following the file (a task that died here would silently stop every later change).
    path = tmp_path / "state.yaml"
    manager = QuotaManager(BASE, 0.0)
    applied, fail = asyncio.Event(), [True]

    def apply(settings: QuotaSettings) -> list[str]:
        applied.set()
        if fail and fail.pop():
            raise RuntimeError("boom")
        return manager.update_settings(settings, 0.0)

    store, stop = QuotaStore(str(path), BASE, apply), asyncio.Event()
    watch = asyncio.create_task(store.watch(stop))
    try:
        with caplog.at_level(logging.ERROR, logger="kqp.admin"):
            path.write_text("entities:\n- {user: bob, request_rate: 3.0}\n")
            await asyncio.wait_for(applied.wait(), 10)
            applied.clear()
            path.write_text("entities:\n- {user: bob, request_rate: 40.0}\n")
            await asyncio.wait_for(applied.wait(), 10)
        assert manager.settings.entities[BOB]["request_rate"] == 40.0
        assert "RuntimeError: boom" in caplog.text
    finally:
        stop.set()
        await asyncio.wait_for(watch, 10)
