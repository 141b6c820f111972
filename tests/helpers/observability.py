"""Shared by the metrics, Prometheus and `kqp top` end-to-end tests: a kqp with its metrics
endpoint, a scrape reader, and a throttled background workload.

The workload runs two entities through kqp with the raw client (helpers.raw_client): `spark-etl`
produces as fast as kqp lets it against a small producer_byte_rate, so it is throttled and muted
for as long as the workload runs; `free` produces and fetches a trickle well inside its quotas.
Threads stop on an event and every socket has a timeout, so `stop()` is bounded.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .kqp_process import KqpProcess
from .names import unique_topic
from .raw_client import RawConnection, Tally
from .topics import ensure_topic

THROTTLED, FREE = "spark-etl", "free"
THROTTLED_RATE = 20_000          # producer_byte_rate of spark-etl, bytes/s
QUOTAS: dict[str, Any] = {
    # Short windows (6 x 0.2 s) so throttling starts within a second of the first burst.
    "window_size_seconds": 0.2,
    "window_count": 6,
    "entities": [
        {"client_id": THROTTLED, "producer_byte_rate": THROTTLED_RATE},
        {"client_id": FREE, "producer_byte_rate": 10_000_000, "consumer_byte_rate": 50_000_000},
    ],
}
_URL = re.compile(r"metrics endpoint (http://[^\s\"/]+)/metrics")


def start_with_metrics(kqp: Callable[..., KqpProcess], upstream: str, /, **config: Any) -> tuple[KqpProcess, str]:
    """kqp with the quotas above and an ephemeral metrics port; returns (process, base URL)."""
    config.setdefault("quotas", QUOTAS)
    quotas = config.pop("quotas")
    proxy = kqp(upstream, quotas, metrics={"listen": "127.0.0.1:0"}, **config)
    return proxy, metrics_url(proxy)


def metrics_url(proxy: KqpProcess) -> str:
    """The base URL of a running kqp's metrics endpoint, from the line it logs at start."""
    line = proxy.wait_for_log("metrics endpoint", timeout=10)
    found = _URL.search(line)
    assert found, f"no URL in {line!r}"
    return found.group(1)


def scrape(base_url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """/metrics as {(sample name, labels): value}."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def sample_reaching(base_url: str, name: str, least: float, timeout: float = 10.0, **labels: str) -> float:
    """The sample once a scrape shows it at `least` or more, or the last one seen after `timeout`
    (0 if none): for a count kqp bumps as it handles what the client saw first, such as a close."""
    deadline = time.monotonic() + timeout
    while True:
        value = sample(scrape(base_url), name, **labels) or 0.0
        if value >= least or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


class ThrottledWorkload:
    """Background traffic: `spark-etl` throttled, `free` within quota, until `stop()`."""

    def __init__(self, bootstrap: str, upstream_kind: str, value_bytes: int = 1000, batch: int = 10) -> None:
        self.bootstrap = bootstrap
        self.topic = unique_topic("observability")
        ensure_topic(bootstrap, self.topic, 1, upstream_kind=upstream_kind)
        self.payload = [b"x" * value_bytes] * batch
        self.tallies = {THROTTLED: Tally(), FREE: Tally()}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._guard, args=(fn,), daemon=True, name=fn.__name__)
                         for fn in (self._throttled, self._free)]

    def __enter__(self) -> ThrottledWorkload:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(35)   # at most one request's socket timeout
        assert not any(t.is_alive() for t in self._threads), "workload threads did not stop"

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:
            if not self._stop.is_set():
                self.errors.append(exc)

    def _leader(self, client_id: str) -> str:
        with RawConnection(self.bootstrap, client_id, self.tallies[client_id]) as boot:
            return boot.leader_address(self.topic)

    def _throttled(self) -> None:
        with RawConnection(self._leader(THROTTLED), THROTTLED, self.tallies[THROTTLED]) as conn:
            while not self._stop.is_set():
                conn.produce(self.topic, self.payload)   # kqp's mute is what paces this loop

    def _free(self) -> None:
        with RawConnection(self._leader(FREE), FREE, self.tallies[FREE]) as conn:
            offset = 0
            while not self._stop.is_set():
                conn.produce(self.topic, self.payload[:2])
                _, offset = conn.fetch(self.topic, offset, max_wait_ms=10)
                self._stop.wait(0.05)

    def wait_throttled(self, timeout: float = 15.0) -> None:
        """Until spark-etl has had a throttled response (so every throttle series exists)."""
        deadline = time.monotonic() + timeout
        while self.tallies[THROTTLED].throttled_responses == 0:
            assert not self.errors, f"workload failed: {self.errors[0]!r}"
            if time.monotonic() >= deadline:
                raise TimeoutError(f"spark-etl was not throttled within {timeout}s")
            time.sleep(0.05)
