"""Kafka's own Java client (kafka-clients 4.4, the client inside Spark) and Kafka's tools through kqp.

Upstream: Apache Kafka (fixture `kafka`); the programs are tests/clients/java/ (helpers.java_clients),
the tools run from the same jars. Quota runs go client -> client tap -> kqp -> upstream tap -> Kafka
(helpers.quota_path) and are judged on the wire after the first span:

- a round trip, idempotent producer and group consumer, every record once, no error;
- producer_byte_rate and consumer_byte_rate: Kafka's rate within 10% of the quota, no timeout, no
  request from a muted connection, the client's throttle metric what the client tap saw, whose sum
  kqp's `kqp_throttle_seconds_total` equals;
- kafka-configs prints through kqp's admin API what it prints against Kafka;
- kafka-producer-perf-test and kafka-consumer-perf-test under quotas set by kafka-configs, Fetch
  throttles no longer than a broker's (`fetch_throttle: empty`);
- Admin.alterClientQuotas / describeClientQuotas set one quota on Kafka and one on kqp; the Java
  producer runs under each at once, printed side by side (a second Kafka whose quota windows kqp's
  copy: Kafka's are whole seconds).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from helpers import java_clients
from helpers.java_clients import Json, throttle_total_ms
from helpers.names import unique_group, unique_topic
from helpers.observability import metrics_url, scrape
from helpers.quota_analysis import (
    cumulative_slope,
    fetch_response_events,
    max_trailing_rate,
    mute_report,
    request_events,
    unanswered_closes,
)
from helpers.quota_path import QuotaPath, open_quota_path
from helpers.topics import ensure_topic
from upstreams.launch import Upstream
from upstreams.provisioned import kafka_or_skip

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

WINDOWS = {"window_size_seconds": 0.2, "window_count": 11}
# Kafka caps each Fetch at (window_count - 1) windows of quota, and so does kqp: with 11 windows a
# response would carry two seconds of quota and leave a handful of points to judge a rate by.
CONSUMER_WINDOWS = {"window_size_seconds": 0.2, "window_count": 4}
PRODUCER_QUOTA = 200_000          # bytes/s, against the several MB/s the client offers on loopback
CONSUMER_QUOTA = 200_000
OFFER_SECONDS = 8.0
RATE_TOLERANCE = 0.10
SPAN_BURST_FACTOR = 1.3           # a span may carry a little over its share (see test_quota_producers)
RECORD_BYTES = 1000
RECORD_OVERHEAD = 70              # bytes a record costs on the wire beyond its value, about
THROTTLE_SLACK_MS = 1.0           # the client's average is a double: its total rounds a little

OpenPath = Callable[..., QuotaPath]


def span(windows: dict[str, float]) -> float:
    return windows["window_size_seconds"] * windows["window_count"]


def allowance(windows: dict[str, float], quota: float) -> float:
    """Bytes a fresh entity may send at once: (window_count - 1) windows of quota."""
    return (windows["window_count"] - 1) * windows["window_size_seconds"] * quota


@pytest.fixture(scope="module")
def java() -> Path:
    """The compiled clients (skips the module where Java cannot run)."""
    return java_clients.classes()


@pytest.fixture
def quota_path(java: Path, kqp: Any, kafka: Upstream) -> Iterator[OpenPath]:
    with contextlib.ExitStack() as stack:
        yield lambda quotas, **config: open_quota_path(stack, kqp, kafka, quotas,
                                                       metrics={"listen": "127.0.0.1:0"}, **config)


def fresh_topic(kafka: Upstream, prefix: str) -> str:
    topic = unique_topic(prefix)
    ensure_topic(kafka, topic, 1, upstream_kind=kafka.kind)
    return topic


def stored_records(kafka: Upstream, topic: str) -> int:
    """Records in partition 0, read from Kafka's watermarks (not through kqp)."""
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "kqp-test-verify"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
    finally:
        consumer.close()
    return int(high - low)


def preload_keyed(kafka: Upstream, topic: str, count: int) -> None:
    """`count` records keyed as the Java producer keys them ("k-<n>"), straight to Kafka."""
    # Small batches: a broker returns whole batches, so a fetch can only be as fine as they are.
    producer = Producer({"bootstrap.servers": kafka, "client.id": "kqp-test-preload", "linger.ms": 5,
                         "batch.size": 16384})
    value = b"x" * RECORD_BYTES
    for n in range(count):
        producer.produce(topic, value, key=f"k-{n}".encode())
        producer.poll(0)
    assert producer.flush(30) == 0, "preload not delivered"


def assert_clean(run: Json) -> None:
    assert not run["errors"], f"java client errors: {run['errors']}"
    if "sent" in run:
        assert run["failed"] == 0 and run["timeouts"] == 0, run
        assert run["acked"] == run["sent"] > 0, run


def kqp_throttle_ms(path: QuotaPath, client_id: str) -> float:
    """kqp's kqp_throttle_seconds_total for `client_id`, over every quota, in ms."""
    samples = scrape(metrics_url(path.kqp))
    return 1000 * sum(value for (name, labels), value in samples.items()
                      if name == "kqp_throttle_seconds_total" and ("client_id", client_id) in labels)


def tap_throttles_ms(path: QuotaPath, client_id: str, after: float = 0.0) -> list[int]:
    """throttle_time_ms of every response the client tap carried to `client_id`'s connections
    (since `after`, a time.monotonic() instant), in the order they passed."""
    mine = {r.connection for r in path.client_tap.requests(client_id=client_id)}
    return [r.throttle_ms or 0 for r in sorted(path.client_tap.responses(), key=lambda r: r.at)
            if r.connection in mine and r.at >= after]


def assert_throttle_figures(path: QuotaPath, run: Json, client_id: str, *, after: float = 0.0,
                            kqp_before_ms: float = 0.0) -> None:
    """The client's own throttle metric is > 0 and is what it was told; kqp's metric is what it told.

    The client reads its metrics before it closes: the responses it had read by then are the first
    `responses` the tap carried (a consumer's last prefetch may answer after). `after` and
    `kqp_before_ms` leave out an earlier client's responses and throttles under the same client id.
    """
    told = tap_throttles_ms(path, client_id, after)
    read = told[:run["responses"]]
    total = throttle_total_ms(run)
    assert run["throttle_ms_max"] is not None and run["throttle_ms_max"] > 0, f"no throttle recorded: {run}"
    assert run["throttle_ms_max"] == max(read), f"client max {run['throttle_ms_max']} ms, tap saw {max(read)} ms"
    assert total is not None and abs(total - sum(read)) <= THROTTLE_SLACK_MS, \
        f"client recorded {total:.0f} ms of throttle over {run['responses']} responses, the tap {sum(read)} ms"
    kqp_total = kqp_throttle_ms(path, client_id) - kqp_before_ms
    assert abs(kqp_total - sum(told)) <= THROTTLE_SLACK_MS, \
        f"kqp_throttle_seconds_total says {kqp_total:.0f} ms, the client was sent {sum(told)} ms"


def assert_muted_and_no_timeouts(path: QuotaPath, client_id: str, *, ignore: frozenset[int] = frozenset()) -> None:
    report = mute_report(path.client_tap, path.upstream_tap, client_id)
    assert report.throttled_responses > 0 and report.checked == report.throttled_responses, report
    assert not report.breaches, "requests reached Kafka while muted:\n" + "\n".join(map(str, report.breaches[:10]))
    closes = unanswered_closes(path.client_tap, ignore=ignore)
    assert not closes, f"the Java client gave up on requests (timed out): {closes}"


def produce_rate(path: QuotaPath, run: Json, client_id: str, windows: dict[str, float]) -> float:
    """The Produce byte rate Kafka received from `client_id`, from one span after the first
    request to the end of the offer."""
    events = request_events(path.upstream_tap.requests(client_id=client_id, api_key=ApiKey.Produce))
    assert events, f"no Produce request from {client_id} reached Kafka"
    start, end = events[0][0] + span(windows), run["offer_end"]
    assert end - start >= 2 * span(windows), f"offer too short to judge: {end - start:.1f}s after the first span"
    return cumulative_slope(events, start, end)


def assert_rate_held(rate: float, quota: float, what: str, tolerance: float = RATE_TOLERANCE) -> None:
    assert abs(rate - quota) <= tolerance * quota, \
        f"{what}: Kafka received {rate / 1000:.1f} kB/s against a quota of {quota / 1000:.1f} kB/s"


# ---- the client ---------------------------------------------------------------------------------

def test_round_trip_exactly_once(java: Path, kqp: Any, kafka: Upstream) -> None:
    proxy = kqp(kafka)
    topic = fresh_topic(kafka, "java-round-trip")
    count = 1000
    sent = java_clients.produce(proxy.bootstrap, topic, "java-round-trip", 60, max_records=count, idempotent=True)
    assert_clean(sent)
    assert sent["sent"] == count
    got = java_clients.consume(proxy.bootstrap, topic, "java-round-trip", unique_group("java"), count, 60)
    assert not got["errors"], got
    assert got["consumed"] == got["keys_distinct"] == count, got
    assert stored_records(kafka, topic) == count   # Kafka holds each record once
    assert sent["throttle_ms_max"] == got["throttle_ms_max"] == 0.0


def test_producer_held_to_quota(quota_path: OpenPath, kafka: Upstream) -> None:
    client_id = "java-flood"
    path = quota_path({**WINDOWS, "entities": [{"client_id": client_id, "producer_byte_rate": PRODUCER_QUOTA}]})
    run = java_clients.produce(path.bootstrap, fresh_topic(kafka, "java-quota"), client_id, OFFER_SECONDS)
    assert_clean(run)
    rate = produce_rate(path, run, client_id, WINDOWS)
    events = request_events(path.upstream_tap.requests(client_id=client_id, api_key=ApiKey.Produce))
    # Spans clear of the first burst (Kafka's allowance, which the first span carries)
    peak = max_trailing_rate(events, span(WINDOWS), events[0][0] + 2 * span(WINDOWS), run["offer_end"])
    print(f"\nJAVA producer through kqp: {rate / 1000:.1f} kB/s = {rate / PRODUCER_QUOTA:.3f} x quota, "
          f"peak span {peak / PRODUCER_QUOTA:.2f} x; throttle max {run['throttle_ms_max']:.0f} ms, "
          f"avg {run['throttle_ms_avg']:.1f} ms over {run['responses']} responses; {run['acked']} acked")
    assert_rate_held(rate, PRODUCER_QUOTA, client_id)
    assert peak <= SPAN_BURST_FACTOR * PRODUCER_QUOTA, f"one span carried {peak / 1000:.1f} kB/s"
    assert_muted_and_no_timeouts(path, client_id)
    assert_throttle_figures(path, run, client_id)


def test_consumer_held_to_quota(quota_path: OpenPath, kafka: Upstream) -> None:
    client_id = "java-drain"
    path = quota_path({**CONSUMER_WINDOWS,
                       "entities": [{"client_id": client_id, "consumer_byte_rate": CONSUMER_QUOTA}]})
    topic = fresh_topic(kafka, "java-drain")
    # Six seconds of quota, written straight to Kafka: the first span's allowance passes at once,
    # the rest takes about five seconds at the quota.
    backlog = int(CONSUMER_QUOTA * 6 / (RECORD_BYTES + RECORD_OVERHEAD))
    preload_keyed(kafka, topic, backlog)
    run = java_clients.consume(path.bootstrap, topic, client_id, unique_group("java-drain"), backlog, 60)
    assert not run["errors"], run
    assert run["consumed"] == run["keys_distinct"] == backlog, run
    events = fetch_response_events(path.upstream_tap, client_id)
    data = [e for e in events if e[1] >= RECORD_BYTES]
    start, end = data[0][0] + span(CONSUMER_WINDOWS), data[-1][0]
    assert end - start >= 2 * span(CONSUMER_WINDOWS), f"backlog read within {end - data[0][0]:.1f}s: not held"
    rate = cumulative_slope(events, start, end)
    print(f"\nJAVA consumer through kqp: {rate / 1000:.1f} kB/s = {rate / CONSUMER_QUOTA:.3f} x quota; "
          f"throttle max {run['throttle_ms_max']:.0f} ms, avg {run['throttle_ms_avg']:.1f} ms over "
          f"{run['responses']} responses")
    assert abs(rate - CONSUMER_QUOTA) <= RATE_TOLERANCE * CONSUMER_QUOTA, \
        f"Kafka sent {rate / 1000:.1f} kB/s of Fetch responses, quota {CONSUMER_QUOTA / 1000:.1f} kB/s"
    # A consumer closing during a long-poll Fetch abandons it legitimately.
    assert_muted_and_no_timeouts(path, client_id, ignore=frozenset({ApiKey.Fetch}))
    assert_throttle_figures(path, run, client_id)


# ---- Kafka's tools --------------------------------------------------------------------------------

CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"


def config_command(bootstrap: str, *args: str) -> str:
    """kafka-configs' stdout (and its error text, which it prints on stdout and stderr)."""
    done = java_clients.run_tool(CONFIG_COMMAND, "--bootstrap-server", bootstrap, *args)
    return done.stdout + "".join(line + "\n" for line in done.stderr.splitlines() if "Exception:" in line)


def test_kafka_configs_answers_as_kafka(java: Path, kqp: Any, kafka: Upstream, tmp_path: Path) -> None:
    """The same kafka-configs commands through kqp's admin API and against Kafka print the same."""
    admin = {"manage_quotas": True, "principals": ["User:ANONYMOUS"], "state_file": str(tmp_path / "state.yaml")}
    proxy = kqp(kafka, admin=admin)
    name = unique_topic("java-configs")   # a fresh client id: Kafka keeps its quotas for the session
    commands = [
        ["--alter", "--add-config", "producer_byte_rate=150000,consumer_byte_rate=250000",
         "--entity-type", "clients", "--entity-name", name],
        ["--alter", "--delete-config", "consumer_byte_rate", "--entity-type", "clients", "--entity-name", name],
        ["--describe", "--entity-type", "clients", "--entity-name", name],
    ]

    def run_all(bootstrap: str) -> list[str]:
        return [config_command(bootstrap, *c).replace(bootstrap, "BOOTSTRAP") for c in commands]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:   # two independent sequences
        through_kqp, from_kafka = pool.map(run_all, [proxy.bootstrap, kafka])
    print("\nJAVA kafka-configs through kqp:\n" + "".join(through_kqp))
    assert through_kqp == from_kafka
    assert f"Quota configs for client-id '{name}' are producer_byte_rate=150000.0" in through_kqp[-1]


def perf_metrics(stdout: str, group: str, prefix: str, responses: str) -> Json:
    """A tool's `--print-metrics` lines ("group:name:{client-id=...} : value") as a run's JSON
    fields: throttle_ms_max/avg from `group`'s `<prefix>-max/avg`, and `responses`' response-total."""
    found: dict[str, float] = {}
    for line in stdout.splitlines():
        match = re.match(r"^([\w-]+:[\w-]+):\{client-id=[^,}]*\}\s*:\s*(-?\d+\.\d+)$", line)
        if match:
            found[match[1]] = float(match[2])
    return {"throttle_ms_max": found[f"{group}:{prefix}-max"], "throttle_ms_avg": found[f"{group}:{prefix}-avg"],
            "responses": int(found[f"{responses}:response-total"]), "errors": found.get(f"{group}:record-error-total")}


def test_perf_tools_under_quotas_set_by_kafka_configs(quota_path: OpenPath, kafka: Upstream,
                                                      tmp_path: Path) -> None:
    client_id, quota = "java-perf", 200_000
    admin = {"manage_quotas": True, "principals": ["User:ANONYMOUS"], "state_file": str(tmp_path / "state.yaml")}
    # `empty`: an over-quota Fetch is answered as a broker answers it, so the consumer's throttles are
    # a broker's too (under `deliver`, the default, the bytes stay charged and later throttles grow).
    path = quota_path(WINDOWS, admin=admin, fetch_throttle="empty")
    set_quota = config_command(path.bootstrap, "--alter", "--add-config",
                               f"producer_byte_rate={quota},consumer_byte_rate={quota}",
                               "--entity-type", "clients", "--entity-name", client_id)
    assert f"Completed updating config for client {client_id}." in set_quota, set_quota
    topic = fresh_topic(kafka, "java-perf")
    records = 1200                   # ~6 s at the quota, the first span's 400 kB of it at once
    done = java_clients.run_tool(
        "org.apache.kafka.tools.ProducerPerformance", "--bootstrap-server", path.bootstrap, "--topic", topic,
        "--num-records", str(records), "--record-size", str(RECORD_BYTES), "--throughput", "-1",
        "--command-property", f"client.id={client_id}", "--print-metrics")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = re.search(r"^(\d+) records sent, ([\d.]+) records/sec .*50th", done.stdout, re.MULTILINE)
    assert summary, done.stdout[-3000:]
    seconds = records / float(summary[2])
    reported = float(summary[2]) * RECORD_BYTES
    produced = perf_metrics(done.stdout, "producer-metrics", "produce-throttle-time", "producer-metrics")
    print(f"\nJAVA kafka-producer-perf-test through kqp: {reported / 1000:.1f} kB/s of values over {seconds:.1f} s "
          f"= {reported / quota:.3f} x quota; throttle max {produced['throttle_ms_max']:.0f} ms, "
          f"avg {produced['throttle_ms_avg']:.1f} ms over {produced['responses']} responses")
    assert int(summary[1]) == records and produced["errors"] == 0, summary[0]
    # The quota and the first span's allowance bound what a short run can report; values are a
    # little less than what the quota counts, so this bound is safe.
    assert reported * seconds <= 1.1 * (quota * seconds + allowance(WINDOWS, quota)), summary[0]
    assert reported >= 0.5 * quota, summary[0]
    assert_muted_and_no_timeouts(path, client_id)
    assert_throttle_figures(path, produced, client_id)

    consumer_from, kqp_before_ms = time.monotonic(), kqp_throttle_ms(path, client_id)
    done = java_clients.run_tool(
        "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", path.bootstrap, "--topic", topic,
        "--num-records", str(records * 2 // 3), "--group", unique_group("java-perf"), "--timeout", "30000",
        "--command-property", f"client.id={client_id}", "--print-metrics")
    assert done.returncode == 0, done.stderr[-3000:]
    header, row = [line for line in done.stdout.splitlines() if line.count(",") >= 9][:2]
    fields = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")], strict=True))
    fetched = float(fields["data.consumed.in.MB"]) * 1024 * 1024
    fetch_seconds = float(fields["fetch.time.ms"]) / 1000
    consumed = perf_metrics(done.stdout, "consumer-fetch-manager-metrics", "fetch-throttle-time", "consumer-metrics")
    print(f"JAVA kafka-consumer-perf-test through kqp: {fetched / fetch_seconds / 1000:.1f} kB/s over "
          f"{fetch_seconds:.1f} s = {fetched / fetch_seconds / quota:.3f} x quota; throttle max "
          f"{consumed['throttle_ms_max']:.0f} ms, avg {consumed['throttle_ms_avg']:.1f} ms over "
          f"{consumed['responses']} responses")
    assert int(fields["data.consumed.in.nMsg"]) >= records * 2 // 3, fields
    assert fetched <= 1.1 * (quota * fetch_seconds + allowance(WINDOWS, quota)), fields
    assert_throttle_figures(path, consumed, client_id, after=consumer_from, kqp_before_ms=kqp_before_ms)
    # A broker's Fetch throttle, X = total / T - W, is at most one response's bytes over the quota,
    # and a response is capped at the allowance: X <= (window_count - 1) x window_size.
    assert consumed["throttle_ms_max"] <= 1.05 * 1000 * allowance(WINDOWS, quota) / quota, consumed


# ---- beside Kafka's own quota ----------------------------------------------------------------------

# Kafka's quota windows are whole seconds; two of them make its first allowance one second of quota.
REFEREE_WINDOWS = {"window_size_seconds": 1, "window_count": 2}
REFEREE_QUOTA = 200_000
REFEREE_SECONDS = 7.0
REFEREE_TOLERANCE = 0.25


@pytest.fixture(scope="module")
def kafka_short_windows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    properties = {"quota.window.size.seconds": str(REFEREE_WINDOWS["window_size_seconds"]),
                  "quota.window.num": str(REFEREE_WINDOWS["window_count"])}
    with kafka_or_skip(tmp_path_factory.mktemp("kafka-quota-windows"), properties=properties) as cluster:
        yield cluster.bootstrap


def test_quotas_set_through_the_admin_api_of_kafka_and_of_kqp(java: Path, kqp: Any, kafka_short_windows: Upstream,
                                                               tmp_path: Path) -> None:
    """Admin.alterClientQuotas sets one producer quota on Kafka (for one client id) and on kqp (for
    another), describeClientQuotas reads each back, and the Java producer runs under each at once."""
    kafka = kafka_short_windows
    ids = {"kafka": "java-kafka-quota", "kqp": "java-kqp-quota"}
    admin = {"manage_quotas": True, "principals": ["User:ANONYMOUS"], "state_file": str(tmp_path / "state.yaml")}
    with contextlib.ExitStack() as stack, concurrent.futures.ThreadPoolExecutor(2) as pool:
        path = open_quota_path(stack, kqp, kafka, REFEREE_WINDOWS, admin=admin, metrics={"listen": "127.0.0.1:0"})
        # The direct client goes through the upstream tap too, so both are judged on one wire.
        bootstrap = {"kafka": path.upstream_tap.hops[kafka.addresses[0]], "kqp": path.bootstrap}

        def set_quota(name: str) -> Json:
            entity = {"client-id": ids[name]}
            altered = java_clients.admin_alter(bootstrap[name], entity, {"producer_byte_rate": REFEREE_QUOTA})
            assert altered["ok"], f"{name}: {altered}"
            return java_clients.admin_describe(bootstrap[name], entity, strict=True)

        for name, described in zip(ids, pool.map(set_quota, ids), strict=True):
            assert described["entries"] == [{"entity": {"client-id": ids[name]},
                                             "values": {"producer_byte_rate": float(REFEREE_QUOTA)}}], described
        topic = fresh_topic(kafka, "java-referee")
        runs = dict(zip(ids, pool.map(lambda name: java_clients.produce(bootstrap[name], topic, ids[name],
                                                                         REFEREE_SECONDS), ids), strict=True))
        rates = {name: produce_rate(path, runs[name], ids[name], REFEREE_WINDOWS) for name in ids}
        lines = [f"{'quota by':8} {'kB/s':>7} {'x quota':>7} {'throttle max ms':>15} {'avg ms':>7} "
                 f"{'total ms':>8} {'responses':>9} {'acked':>6}"]
        for name, run in runs.items():
            lines.append(f"{name:8} {rates[name] / 1000:7.1f} {rates[name] / REFEREE_QUOTA:7.3f} "
                         f"{run['throttle_ms_max']:15.0f} {run['throttle_ms_avg']:7.1f} "
                         f"{throttle_total_ms(run) or 0:8.0f} {run['responses']:9d} {run['acked']:6d}")
        print(f"\nJAVA producer, {REFEREE_QUOTA / 1000:.0f} kB/s quota, windows "
              f"{REFEREE_WINDOWS['window_count']} x {REFEREE_WINDOWS['window_size_seconds']} s, "
              f"{REFEREE_SECONDS:.0f} s offered:\n" + "\n".join(lines))
        for name, run in runs.items():
            assert_clean(run)
            assert run["throttle_ms_max"] > 0, f"{name}: no throttle recorded: {run}"
            assert_rate_held(rates[name], REFEREE_QUOTA, f"quota by {name}", REFEREE_TOLERANCE)
        assert_throttle_figures(path, runs["kqp"], ids["kqp"])
