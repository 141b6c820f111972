"""ConfigReloader's outcomes without a running proxy: what is applied, logged and counted.

The live behaviour (file watch, SIGHUP, a producer held to the new quota) is in test_reload.py;
here the reloader is called directly on files in a temporary directory, so every outcome can be
checked, including the one a live test cannot provoke: an unexpected error while applying, which
must be logged and counted rather than end the watch task (and with it every later reload).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from kqp.config.loader import load_config
from kqp.proxy.runtime.reload import ConfigReloader
from kqp.quotas.model import QuotaSettings


def write(path: Path, rate: object) -> None:
    path.write_text(yaml.safe_dump({
        "upstream": {"bootstrap_servers": "127.0.0.1:9092"},
        "quotas": {"entities": [{"client_id": "app", "producer_byte_rate": rate}]},
    }))


def reloader(path: Path, apply: object) -> tuple[ConfigReloader, list[str]]:
    results: list[str] = []
    return ConfigReloader(str(path), load_config(path), apply, on_result=results.append), results  # type: ignore[arg-type]


async def test_good_file_is_applied_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "kqp.yaml"
    write(path, 1000)
    applied: list[QuotaSettings] = []
    r, results = reloader(path, lambda s: applied.append(s) or ["/clients/app: producer_byte_rate 1000 -> 500"])
    write(path, 500)
    assert await r.reload() is True
    assert results == ["success"]
    assert [dict(s.entities).popitem()[1]["producer_byte_rate"] for s in applied] == [500]
    assert r.current.quotas is applied[0]


async def test_broken_file_keeps_the_running_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "kqp.yaml"
    write(path, 1000)
    applied: list[QuotaSettings] = []
    r, results = reloader(path, lambda s: applied.append(s) or [])
    before = r.current
    write(path, "fast")
    with caplog.at_level(logging.ERROR, "kqp.reload"):
        assert await r.reload() is False
    assert results == ["failure"] and applied == [] and r.current is before
    [record] = caplog.records
    assert "keeping the running config" in record.message
    assert "quotas.entities[0].producer_byte_rate" in record.message


async def test_unexpected_error_is_logged_counted_and_survived(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "kqp.yaml"
    write(path, 1000)
    calls: list[int] = []

    def apply(settings: QuotaSettings) -> list[str]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return []

    r, results = reloader(path, apply)
    with caplog.at_level(logging.ERROR, "kqp.reload"):
        await r._reload_guarded()                 # what the watch task calls: must not raise
    assert results == ["failure"]
    assert "config reload failed unexpectedly" in caplog.text and "boom" in caplog.text
    await r._reload_guarded()
    assert results == ["failure", "success"]
