"""The admin state file: written atomically off the event loop, read back at a restart, shared by
processes, never dropped.

Real files in a temporary directory, a real quota manager and the running event loop (a commit
writes in the store's thread, then puts the change in force on the loop); the watch is the same
`refresh` these tests call, but for the one test of the watch task itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

import pytest
import yaml

from kqp.config.errors import ConfigError
from kqp.proxy.runtime.state import quota_store
from kqp.proxy.runtime.state.quota_store import CommitFailed, QuotaStore, read_state
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import EntitySpec, Principal, QuotaSettings

ALICE, BOB = EntitySpec("alice", None), EntitySpec("bob", None)
BASE = QuotaSettings(entities={ALICE: {"producer_byte_rate": 1000.0, "consumer_byte_rate": 5000.0}})


async def commit(store: QuotaStore, changes: list, who: str) -> None:
    await store.commit(changes, who, asyncio.get_running_loop())


def commit_now(store: QuotaStore, changes: list, who: str) -> None:
    """A commit from a test without a loop of its own: on a loop of its own, until it is done."""
    asyncio.run(commit(store, changes, who))


def store_at(path: Path, base: QuotaSettings = BASE) -> tuple[QuotaStore, QuotaManager]:
    manager = QuotaManager(base, 0.0)
    store = QuotaStore(str(path), base, lambda settings: manager.update_settings(settings, 0.0))
    store.rebase(base)
    return store, manager


def test_a_commit_is_in_force_at_once_and_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    store, manager = store_at(path)
    commit_now(store, [(ALICE, {"producer_byte_rate": 2048.0, "consumer_byte_rate": None}),
                         (BOB, {"request_rate": 3.0})], "User:ops")
    expected = {ALICE: {"producer_byte_rate": 2048.0}, BOB: {"request_rate": 3.0}}
    assert {e: dict(v) for e, v in manager.settings.entities.items()} == expected
    # The file says it in plain YAML, the removal as null, and no temporary file is left behind.
    assert yaml.safe_load(path.read_text())["entities"] == [
        {"user": "alice", "consumer_byte_rate": None, "producer_byte_rate": 2048.0},
        {"user": "bob", "request_rate": 3.0}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.yaml", "state.yaml.history.jsonl", "state.yaml.lock"]
    _, restarted = store_at(path)   # a restart: the same base, the file read back
    assert {e: dict(v) for e, v in restarted.settings.entities.items()} == expected


def test_a_config_reload_keeps_the_admin_layer_over_the_new_base(tmp_path: Path) -> None:
    store, manager = store_at(tmp_path / "state.yaml")
    commit_now(store, [(ALICE, {"producer_byte_rate": 2048.0})], "User:ops")
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
    commit_now(store, [(BOB, {"request_rate": 3.0})], "User:ops")
    path.write_text("entities: 7\n")   # someone broke it by hand
    with pytest.raises(CommitFailed, match="admin state file: must be a list"):
        commit_now(store, [(ALICE, {"producer_byte_rate": 1.0})], "User:ops")
    assert path.read_text() == "entities: 7\n"   # not overwritten: what it held is not lost
    assert dict(manager.settings.entities[ALICE])["producer_byte_rate"] == 1000.0


def test_processes_sharing_the_file_see_and_keep_each_other_s_changes(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.yaml"
    first, first_quotas = store_at(path)
    second, second_quotas = store_at(path)   # another worker, or an instance on the same volume
    commit_now(first, [(ALICE, {"producer_byte_rate": 2048.0})], "User:ops")
    asyncio.run(second.refresh())   # what its watch does when the file's stat changes
    assert second_quotas.settings.entities[ALICE]["producer_byte_rate"] == 2048.0
    commit_now(second, [(BOB, {"request_rate": 3.0})], "User:ops")   # re-read under the lock: alice's change stays
    assert set(read_state(str(path))) == {ALICE, BOB}
    asyncio.run(first.refresh())
    assert first_quotas.settings.entities[BOB]["request_rate"] == 3.0
    # A file broken on disk is not taken: the quotas in force stay, and the log says why.
    path.write_text("entities: [{user: 3}]\n")
    with caplog.at_level(logging.ERROR, logger="kqp.admin"):
        asyncio.run(first.refresh())
    assert first_quotas.settings.entities[BOB]["request_rate"] == 3.0
    assert "does not load; keeping the quotas in force" in caplog.text and str(path) in caplog.text


def test_the_write_is_a_rename_over_the_file(tmp_path: Path) -> None:
    # Atomic: readers see the old file or the new one, never a half-written one; the old inode stays whole.
    path = tmp_path / "state.yaml"
    store, _ = store_at(path)
    commit_now(store, [(BOB, {"request_rate": 3.0})], "User:ops")
    before = os.stat(path).st_ino
    with open(path) as old:
        commit_now(store, [(BOB, {"request_rate": 4.0})], "User:ops")
        assert "request_rate: 3.0" in old.read()
    assert os.stat(path).st_ino != before


async def test_the_write_leaves_the_loop_and_commits_land_in_the_order_asked(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Ten connections alter bob's request_rate at once (1, 2, ... 10): each commit is written in the
    # store's thread, never the loop's, each re-reads what the one before wrote, and the last asked is
    # what the file and the quotas in force say, as it would be had they come one after the other.
    path = tmp_path / "state.yaml"
    store, manager = store_at(path)
    writers: set[str] = set()
    write = quota_store.write_atomically

    def spied(target: str, text: str) -> None:
        writers.add(threading.current_thread().name)
        write(target, text)

    monkeypatch.setattr(quota_store, "write_atomically", spied)
    await asyncio.gather(*(commit(store, [(BOB, {"request_rate": float(n)}), (EntitySpec(f"u{n}", None),
                                                                             {"request_rate": 1.0})], "User:ops")
                           for n in range(1, 11)))
    assert writers and threading.current_thread().name not in writers
    assert all(name.startswith("kqp-state-file") for name in writers)
    on_disk = read_state(str(path))
    assert on_disk[BOB]["request_rate"] == 10.0 and len(on_disk) == 11   # every change kept, the last one last
    assert manager.settings.entities[BOB]["request_rate"] == 10.0
    store.close()


def test_an_admin_change_keeps_what_was_measured_as_a_reload_does(tmp_path: Path) -> None:
    # alice produced 5000 bytes at t=0 under her config-file quota of 1000 B/s; the API lowers it to
    # 500 B/s. The sensor is the same one (a reload's path): its 5000 bytes still count, at the new limit.
    store, manager = store_at(tmp_path / "state.yaml")
    alice = Principal("alice", "app")
    manager.record_produce(alice, 5000, 1, 1, 0.0)
    commit_now(store, [(ALICE, {"producer_byte_rate": 500.0})], "User:ops")
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
