"""A reload that changes `quotas.scope` or `quotas.cluster` says it needs a restart; the quotas still apply."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kqp.config.loader import load_config
from kqp.proxy.runtime.reload import ConfigReloader
from kqp.quotas.model import QuotaSettings

BASE = "upstream: {bootstrap_servers: 'k:9092'}\nquotas:\n  entities: [{client_id: a, request_rate: %d}]\n"


async def test_scope_change_needs_a_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "kqp.yaml"
    path.write_text(BASE % 10)
    applied: list[QuotaSettings] = []
    reloader = ConfigReloader(str(path), load_config(path), lambda s: applied.append(s) or ["changed"])
    path.write_text(BASE % 20 + "  scope: cluster\n  cluster: {redis_url: 'redis://r:6379/0'}\n")
    caplog.set_level(logging.WARNING, logger="kqp.reload")
    assert await reloader.reload()
    assert [r.getMessage() for r in caplog.records] == [
        "config reload: a change of 'quotas.scope/quotas.cluster' needs a restart; it is not applied"]
    [settings] = applied   # the quota values themselves apply live
    assert next(iter(settings.entities.values()))["request_rate"] == 20
