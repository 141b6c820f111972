"""Issue 20, measured end to end: clients that do not back off are paced, not timed out.

The issue's case: kafka-python 3 pinned to `api_version=(0, 11)` (Produce v3, no client-side
throttling, no ApiVersions request at all), 5 requests in flight, `request_timeout_ms=5000`,
`retries=0`, 1 kB records flat out, against `producer_byte_rate` 150 kB/s, at Kafka's default quota
windows (1 s x 11). The broker's behaviour (`quotas.pacing: off`) mutes each request for its whole
throttle; over a young sensor the throttles grow (X = U / T - W while W is still 10 windows), and
the fourth request in line waits the three throttles before it: request timeouts. Paced, each
request is followed by its own cost of silence (its bytes / the quota), so the worst wait is about
(requests in flight) x (request size) / quota, here 5 x ~64 kB / 150 kB/s = ~2 s, and the long-run
rate is still the quota.

The same holds for the other clients that cannot or do not back off, all run at once through one
kqp, each under its own 150 kB/s quota:
* a kafka-python 2.x fork pinned to (0, 11), in its own environment (`helpers.old_kafka_python`);
* raw Produce v3 frames from a client that never sends ApiVersions (`helpers.raw_flood`);
* a Sarama-like client: raw Produce v7 frames (a version that throttles itself) sent without waiting
  for any throttle; kqp sees it send while throttled (backoff.py) and counts it, but does not pace
  it (throttling.py `_paced` says why): it is held to the quota by Kafka's throttles, its request
  timeouts are printed, not judged.

Rates are judged on the upstream tap, by the least-squares slope of cumulative bytes after the first
span (11 s: a fresh sensor lets its first burst through), over 30+ s: almost three spans, so the
sawtooth of Kafka's sampled rate averages out on a busy machine too.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import old_kafka_python
from helpers.names import unique_topic
from helpers.observability import metrics_url, sample, scrape
from helpers.quota_analysis import cumulative_slope, request_events
from helpers.quota_path import QuotaPath, open_quota_path, quota_upstream
from helpers.raw_client import RawConnection, Tally
from helpers.raw_flood import RawFlood
from helpers.topics import ensure_topic
from kafka.protocol.api_key import ApiKey
from upstreams.launch import Upstream

pytestmark = pytest.mark.e2e

QUOTA = 150_000                      # producer_byte_rate, bytes/s
SPAN = 11.0                          # Kafka's default windows: 11 x 1 s
SECONDS = 45.0                       # offered flat out: ~34 s judged after the first span
RATIO = (0.85, 1.10)
SCRIPT = Path(__file__).parents[1] / "helpers" / "flat_out_producer.py"
KP3, KP2, RAW3, SARAMA = "kp3-pinned", "kp2-pinned", "raw-v3", "sarama-like-v7"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with quota_upstream(tmp_path_factory.mktemp("pacing")) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="module")
def kafka_python2(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """kafka-python 2.x's interpreter, or None when the package index is out of reach."""
    try:
        return old_kafka_python.build(tmp_path_factory.mktemp("kafka-python2") / "venv")
    except old_kafka_python.IndexUnreachable:
        return None


def quotas(pacing: bool, *client_ids: str) -> dict[str, Any]:
    """Kafka's sampled rate, paced or not: what pacing was made for (a steady quota's throttle is a
    request's own cost already)."""
    return {"pacing": "on" if pacing else "off", "algorithm": "sampled",
            "entities": [{"client_id": c, "producer_byte_rate": QUOTA} for c in client_ids]}


def flat_out(python: str, bootstrap: str, topic: str, client_id: str) -> dict[str, Any]:
    """Issue 20's kafka-python producer (flat_out_producer.py) under `python`; its JSON report."""
    done = subprocess.run([python, "-I", str(SCRIPT), bootstrap, topic, client_id, str(SECONDS), "4", "0.11"],
                          capture_output=True, text=True, timeout=SECONDS + 120, stdin=subprocess.DEVNULL,
                          env=old_kafka_python._clean_env(), check=False)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"{client_id} exited {done.returncode}: {done.stderr[-2000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    assert report["sent"] > 1000 and not report["error_samples"], report
    return report


def raw(path: QuotaPath, topic: str, client_id: str, version: int) -> dict[str, Any]:
    with RawConnection(path.bootstrap, f"{client_id}-lookup", Tally()) as lookup:
        leader = lookup.leader_address(topic)
    report = RawFlood(leader, topic, client_id, version).run(SECONDS)
    assert report.sent > 50 and not report.errors, report.errors[:5]
    worst = max(report.latencies, default=0.0)
    return {"sent": report.sent, "acked": report.answered, "timeouts": report.timeouts, "timeout_lines": 0,
            "worst_wait_s": round(worst, 2), "throttle_max_ms": report.throttle_max_ms}


def run_all(clients: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Every client at once, each in a thread of its own; their reports."""
    reports: dict[str, dict[str, Any]] = {}
    failures: list[BaseException] = []

    def one(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        try:
            reports[name] = fn()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=one, args=item, daemon=True) for item in clients.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 180)
    if failures:
        raise failures[0]
    assert len(reports) == len(clients), f"clients that did not finish: {set(clients) - set(reports)}"
    return reports


def ratio(path: QuotaPath, client_id: str) -> float:
    """The rate the upstream received from `client_id` after the first span, over the quota."""
    events = request_events(path.upstream_tap.requests(client_id=client_id, api_key=ApiKey.Produce))
    assert events, f"nothing from {client_id} reached the upstream"
    start, end = events[0][0] + SPAN, events[-1][0]
    assert end - start >= 2.5 * SPAN, f"{client_id}: only {end - start:.0f} s to judge after the first span"
    return cumulative_slope(events, start, end) / QUOTA


def topics(upstream: Upstream) -> tuple[str, str]:
    four, one = unique_topic("paced4"), unique_topic("paced1")
    ensure_topic(upstream, four, 4, upstream_kind=upstream.kind)
    ensure_topic(upstream, one, 1, upstream_kind=upstream.kind)
    return four, one


@pytest.fixture
def quota_path(kqp: Any, upstream: Upstream) -> Iterator[Callable[..., QuotaPath]]:
    with contextlib.ExitStack() as stack:
        yield lambda q: open_quota_path(stack, kqp, upstream, q, metrics={"listen": "127.0.0.1:0"})


def test_clients_that_do_not_back_off_are_paced_to_the_quota_without_timeouts(
        quota_path: Callable[..., QuotaPath], upstream: Upstream, kafka_python2: Path | None) -> None:
    path = quota_path(quotas(True, KP3, KP2, RAW3, SARAMA))
    four, one = topics(upstream)
    clients: dict[str, Callable[[], dict[str, Any]]] = {
        KP3: lambda: flat_out(sys.executable, path.bootstrap, four, KP3),
        RAW3: lambda: raw(path, one, RAW3, 3),
        SARAMA: lambda: raw(path, one, SARAMA, 7),
    }
    if kafka_python2 is not None:
        clients[KP2] = lambda: flat_out(str(kafka_python2), path.bootstrap, four, KP2)
    reports = run_all(clients)
    measured = {name: {**report, "ratio": round(ratio(path, name), 3)} for name, report in reports.items()}
    print(f"\npacing on: {json.dumps(measured, indent=1)}")
    for name, m in measured.items():
        assert name == SARAMA or (m["timeouts"] == 0 and m["timeout_lines"] == 0), f"{name} timed out: {m}"
        assert RATIO[0] <= m["ratio"] <= RATIO[1], f"{name}: {m['ratio']:.2f}x the quota ({m})"
    # Who does not back off, per client software: the old versions by version, the Sarama-like
    # client because it was seen sending while throttled.
    samples = scrape(metrics_url(path.kqp))
    assert (sample(samples, "kqp_client_throttle_ignored_total", software="unknown", version="Produce v3",
                   reason="version") or 0) > 0
    assert (sample(samples, "kqp_client_throttle_ignored_total", software="unknown", version="Produce v7",
                   reason="observed") or 0) > 0
    if kafka_python2 is None:
        pytest.skip("kafka-python 2.x could not be installed (package index unreachable); the others passed")


def test_without_pacing_the_issue_case_times_out_as_behind_a_broker(
        quota_path: Callable[..., QuotaPath], upstream: Upstream) -> None:
    """`quotas.pacing: off` restores the broker's mutes, and with them the issue's timeouts."""
    path = quota_path(quotas(False, KP3))
    four, _ = topics(upstream)
    report = flat_out(sys.executable, path.bootstrap, four, KP3)
    print(f"\npacing off: {json.dumps({**report, 'ratio': round(ratio(path, KP3), 3)})}")
    assert report["timeouts"] + report["timeout_lines"] > 0, f"no request timed out without pacing: {report}"
