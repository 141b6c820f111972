"""Reading a changed file never stalls the event loop: the config reload, the admin state file and a
rotated certificate are read and parsed in a worker thread while the loop keeps serving.

Each file is replaced by one whose read takes HOLD seconds (a FIFO, helpers/slow_files.py: what a
slow mount does to kqp's plain open and read), and a 10 ms timer on the loop measures the longest
gap between its wake-ups while kqp reads it. Read on the loop, the gap would be the whole HOLD; off
it, a busy machine's scheduling delay. Then the read's result is in force, as from any file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from helpers.slow_files import LoopProbe, slow_file
from helpers.tls import TlsFiles

from kqp.config import parse_config
from kqp.config.loader import load_config
from kqp.proxy.runtime.cert_reload import ReloadingContext
from kqp.proxy.runtime.reload import ConfigReloader
from kqp.proxy.runtime.state.quota_store import QuotaStore
from kqp.proxy.tls.contexts import server_context, watched_files
from kqp.quotas.model import EntitySpec, QuotaSettings

HOLD = 1.0           # how long each read is kept waiting
STALL_BOUND = 0.5    # the longest gap allowed: far below HOLD, far above a busy loop's scheduling delay


def config_text(rate: int) -> str:
    return yaml.safe_dump({"upstream": {"bootstrap_servers": "127.0.0.1:9092"},
                           "quotas": {"entities": [{"client_id": "app", "producer_byte_rate": rate}]}})


async def test_a_slow_config_file_is_reloaded_with_the_loop_running(tmp_path: Path) -> None:
    path = tmp_path / "kqp.yaml"
    path.write_text(config_text(1000))
    applied: list[QuotaSettings] = []
    reloader = ConfigReloader(str(path), load_config(path), lambda s: applied.append(s) or [])
    with slow_file(path, config_text(500), HOLD) as writer:
        async with LoopProbe().running() as probe:
            assert await asyncio.wait_for(reloader.reload(), 30)
    assert writer.error is None and writer.held >= HOLD
    assert probe.longest < STALL_BOUND, f"the loop stalled {probe.longest:.2f}s during a {HOLD}s read"
    assert [dict(s.entities).popitem()[1]["producer_byte_rate"] for s in applied] == [500]


async def test_a_slow_state_file_is_taken_with_the_loop_running(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    applied: list[QuotaSettings] = []
    store = QuotaStore(str(path), QuotaSettings(), lambda s: applied.append(s) or [])
    with slow_file(path, "entities:\n- {user: bob, request_rate: 3.0}\n", HOLD) as writer:
        async with LoopProbe().running() as probe:
            await asyncio.wait_for(store.refresh(), 30)   # what the watch does when the file's stat changes
    assert writer.error is None and writer.held >= HOLD
    assert probe.longest < STALL_BOUND, f"the loop stalled {probe.longest:.2f}s during a {HOLD}s read"
    assert [dict(s.entities) for s in applied] == [{EntitySpec("bob", None): {"request_rate": 3.0}}]


async def test_a_slow_certificate_is_rebuilt_with_the_loop_running(tmp_path: Path) -> None:
    certs = TlsFiles(tmp_path)
    section = parse_config({"tls": certs.listener()}).tls
    assert section is not None
    reloading = ReloadingContext("listener", lambda: server_context(section), watched_files(section))
    first = reloading.context
    certs.issue_server("kqp-2")   # the rotation: its certificate is then served slowly
    with slow_file(certs.server_cert, certs.server_cert.read_text(), HOLD) as writer:
        async with LoopProbe().running() as probe:
            assert not await reloading.poll()   # changed: waits one poll for the files to settle
            assert await asyncio.wait_for(reloading.poll(), 30)
    assert writer.error is None and writer.held >= HOLD
    assert probe.longest < STALL_BOUND, f"the loop stalled {probe.longest:.2f}s during a {HOLD}s read"
    assert reloading.context is not first
