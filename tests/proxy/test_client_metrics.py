"""Which client libraries honour throttles: the observer's client series and `kqp top`'s section
(issue 20; client_metrics.py, top_clients.py). A real observer, its hooks called as the core calls
them, connections as views; times are plain numbers."""

from __future__ import annotations

from prometheus_client import generate_latest

from kqp.proxy.connection.views import ConnectionView
from kqp.proxy.observability.client_metrics import OTHER, ClientStats, RecentThrottles
from kqp.proxy.observability.metrics import PrometheusObserver
from kqp.proxy.tools.top import parse, render
from kqp.quotas.model import Principal


def view(software: str, version: str, honours: str) -> ConnectionView:
    return ConnectionView("p", "broker-1", "ANONYMOUS", ("c",), software, version, honours, None, 0.0, "open")


def observer(now: list[float]) -> PrometheusObserver:
    obs = PrometheusObserver(clock=lambda: now[0], process_metrics=False, entity_expiry_seconds=60)
    obs.clients.connections = lambda: [view("sarama", "1.22.0", "no"), view("sarama", "1.22.0", "no"),
                                       view("librdkafka", "2.3.0", "yes"), view("librdkafka", "2.3.0", "unknown"),
                                       view("unknown", "Produce v3", "no")]
    return obs


def test_top_shows_each_client_software_its_connections_and_the_throttles_it_ignored() -> None:
    now = [10.0]
    obs = observer(now)
    for _ in range(7):
        obs.throttle_ignored("sarama", "1.22.0", "observed")
    for _ in range(3):
        obs.throttle_ignored("unknown", "Produce v3", "version")
    obs.requests_dropped(4)
    text = generate_latest(obs.registry).decode()
    assert 'kqp_client_throttle_ignored_total{reason="observed",software="sarama",version="1.22.0"} 7.0' in text
    assert 'kqp_client_connections{honours_throttles="no",software="sarama",version="1.22.0"} 2.0' in text
    assert "kqp_requests_dropped_total 4.0" in text
    lines = render(parse(text, 1.0), "http://kqp/metrics", width=200)
    at = next(i for i, line in enumerate(lines) if line.startswith("CLIENT SOFTWARE"))
    assert lines[at].split() == ["CLIENT", "SOFTWARE", "VERSION", "CONNECTIONS", "HONOURS", "THROTTLES", "THROTTLES",
                                 "IGNORED"]
    # Those that ignore the most throttles first.
    assert lines[at + 1].split() == ["sarama", "1.22.0", "2", "no", "2", "7", "(observed)"]
    assert lines[at + 2].split() == ["unknown", "Produce", "v3", "1", "no", "1", "3", "(version)"]
    assert lines[at + 3].split() == ["librdkafka", "2.3.0", "2", "yes", "1,", "unknown", "1", "-"]


def test_software_labels_are_bounded_and_expire() -> None:
    stats = ClientStats(max_labels=2)
    stats.throttle_ignored("a", "1", "observed", 0.0)
    stats.throttle_ignored("b" * 100, "1", "observed", 0.0)
    stats.throttle_ignored("c", "1", "observed", 5.0)      # past the bound: counted as other
    assert set(stats.ignored) == {("a", "1", "observed"), ("b" * 64, "1", "observed"), (OTHER, OTHER, "observed")}
    stats.expire(60.0, 60.0)                                # a and b idle for 60 s, other for 55
    assert set(stats.ignored) == {(OTHER, OTHER, "observed")}


def test_recent_throttles_are_summed_per_cause_over_the_last_minutes_and_bounded() -> None:
    recent, p = RecentThrottles(max_entities=1), Principal("u", "c")
    recent.add(p, "producer_byte_rate", 0.5, 0.0)
    recent.add(p, "producer_byte_rate", 2.0, 95.0)
    recent.add(p, "request_rate", 0.25, 95.0)
    recent.add(Principal("u", "other"), "producer_byte_rate", 1.0, 95.0)   # past the bound: not kept
    # At t=300 the last 5 minutes still hold the bucket of t=0 (0-10 s): all three.
    assert recent.summary(p, 300.0, 300.0) == {
        "producer_byte_rate": {"count": 2, "total_seconds": 2.5, "largest_seconds": 2.0},
        "request_rate": {"count": 1, "total_seconds": 0.25, "largest_seconds": 0.25}}
    # At t=320 that bucket is older than the span.
    assert recent.summary(p, 320.0, 300.0)["producer_byte_rate"]["count"] == 1
    assert recent.summary(Principal("u", "other"), 300.0, 300.0) == {}
    recent.forget([p])
    assert recent.summary(p, 300.0, 300.0) == {}
