"""A real Prometheus (the Debian package's binary, started by the test, not as a service) on a free port.

`prometheus(directory, targets)` runs it from deploy/prometheus/prometheus.yml with the scrape and
evaluation intervals shortened to 1 s and `targets` as its kqp job's targets (none: it scrapes no
kqp; `twice`: a second job scrapes them too, as a pods job and a service-endpoints job may), the
shipped alert rules loaded (`edit_rules` may change them first), and yields its base URL; it is
stopped on exit. `api` and `query` ask its HTTP API.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from .net import free_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


@contextmanager
def prometheus(directory: Path, targets: Sequence[str], *, twice: bool = False,
               edit_rules: Callable[[dict[str, Any]], None] | None = None) -> Iterator[str]:
    if not os.path.exists(PROMETHEUS):
        pytest.skip("needs Prometheus: apt-get install -y prometheus")
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["scrape_configs"][0]["static_configs"] = [{"targets": list(targets)}]
    if twice:
        config["scrape_configs"].append({**config["scrape_configs"][0], "job_name": "kqp-again"})
    rules = yaml.safe_load((DEPLOY / "prometheus" / "kqp-alerts.yml").read_text())
    if edit_rules is not None:
        edit_rules(rules)
    (directory / "kqp-alerts.yml").write_text(yaml.safe_dump(rules))
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (directory / "prometheus.log").open("w")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={directory / 'prometheus.yml'}",
                             f"--storage.tsdb.path={directory / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--log.level=warn"], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {(directory / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def api(url: str, path: str, **params: str) -> Any:
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}/api/v1/{path}?{query}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


def query(url: str, expr: str) -> list[dict[str, Any]]:
    return api(url, "query", query=expr)["result"]
