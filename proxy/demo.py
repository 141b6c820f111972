"""`kqp demo`: an embedded upstream, kqp in front of it, and clients that show what kqp does.

The upstream is librdkafka's mock cluster (3 brokers inside this process, from the confluent-kafka
wheel), so the demo needs nothing running beforehand. kqp runs on its own event loop in a thread;
the clients are real confluent-kafka clients talking to kqp over loopback sockets.
Scenes: a transparent produce/consume round trip, then a producer far above its byte-rate quota
being throttled per KIP-219 (achieved rate against the quota, throttle time, no request timed out).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from typing import Any

from kqp.config.loader import parse_config

from . import loops
from .server import ProxyServer

QUOTA_BYTES = 256 * 1024
WINDOW_SECONDS = 0.2
WINDOW_COUNT = 11


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def scene_throttled(bootstrap: str, ck: Any, seconds: float) -> bool:
    _say()
    _say(f"== scene 2: a producer offering far more than its quota "
         f"(producer_byte_rate {QUOTA_BYTES // 1024} KiB/s, windows of {WINDOW_SECONDS}s)")
    stats: dict[str, float] = {"throttle_max_ms": 0.0, "throttle_avg_ms": 0.0}

    def on_stats(raw: str) -> None:
        doc = json.loads(raw)
        for b in doc.get("brokers", {}).values():
            t = b.get("throttle", {})
            stats["throttle_max_ms"] = max(stats["throttle_max_ms"], float(t.get("max", 0)))
            if t.get("avg"):
                stats["throttle_avg_ms"] = float(t["avg"])

    producer = ck.Producer({"bootstrap.servers": bootstrap, "client.id": "demo-throttled", "linger.ms": 20,
                            "batch.size": 256 * 1024, "message.timeout.ms": 60000, "request.timeout.ms": 10000,
                            "statistics.interval.ms": 500, "stats_cb": on_stats})
    delivered = [0]
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err:
            failures.append(str(err))
        else:
            delivered[0] += len(msg.value())

    payload = b"y" * 1024
    start = time.monotonic()
    last_tick, last_bytes = start, 0
    rates: list[float] = []
    while time.monotonic() - start < seconds:
        try:
            producer.produce("demo-throttled", value=payload, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
        now = time.monotonic()
        if now - last_tick >= 1.0:
            rate = (delivered[0] - last_bytes) / (now - last_tick)
            rates.append(rate)
            _say(f"   t={now - start:4.1f}s  delivered {rate / 1024:8.1f} KiB/s  quota {QUOTA_BYTES / 1024:.0f} KiB/s"
                 f"  throttle seen by client: avg {stats['throttle_avg_ms']:6.0f} ms")
            last_tick, last_bytes = now, delivered[0]
    producer.flush(60)
    elapsed = time.monotonic() - start
    steady = rates[2:] or rates
    achieved = sum(steady) / len(steady) if steady else 0.0
    _say(f"   steady-state rate {achieved / 1024:.1f} KiB/s against a quota of {QUOTA_BYTES / 1024:.0f} KiB/s "
         f"({achieved / QUOTA_BYTES:.0%}); overall {delivered[0] / elapsed / 1024:.1f} KiB/s")
    _say(f"   largest throttle_time_ms the client saw: {stats['throttle_max_ms']:.0f} ms; "
         f"failed deliveries (timeouts included): {len(failures)}")
    return not failures and stats["throttle_max_ms"] > 0


def run_demo(seconds: float = 6.0, spark: bool = False, loop_choice: str = "auto") -> int:
    try:
        import confluent_kafka as ck
    except ImportError:
        print("kqp demo needs confluent-kafka: pip install 'kafka-quota-proxy[demo]'", file=sys.stderr)
        return 2
    mock = ck.Producer({"test.mock.num.brokers": 3, "bootstrap.servers": "x", "log_level": 2})
    upstream = ",".join(f"{b.host}:{b.port}" for b in mock.list_topics(timeout=10).brokers.values())
    config = parse_config({
        "listen": f"127.0.0.1:{_free_port()}",
        "broker_port_base": 0,
        "upstream": {"bootstrap_servers": upstream},
        "quotas": {
            "window_size_seconds": WINDOW_SECONDS,
            "window_count": WINDOW_COUNT,
            "entities": [{"client_id": "demo-throttled", "producer_byte_rate": QUOTA_BYTES}],
        },
    }, source=None)
    _say(f"kqp demo: embedded upstream (librdkafka mock cluster, 3 brokers at {upstream})")
    with EmbeddedProxy(config, loop_choice) as proxy:
        bootstrap = f"127.0.0.1:{proxy.server.ctx.listeners.bootstrap_port}"  # type: ignore[union-attr]
        _say(f"kqp listening on {bootstrap}")
        _say()
        ok = scene_transparent(bootstrap, ck)
        ok = scene_throttled(bootstrap, ck, seconds) and ok
        if spark:
            ok = _scene_spark(bootstrap) and ok
    _say()
    _say("demo " + ("finished: every scene behaved as expected" if ok else "FAILED: see above"))
    return 0 if ok else 1


def _scene_spark(bootstrap: str) -> bool:
    try:
        from kqp.spark.demo import run_spark_demo
    except ImportError as exc:
        _say(f"== spark scene skipped: {exc} (pip install 'kafka-quota-proxy[spark]')")
        return True
    _say()
    _say("== scene 3: a PySpark job writing through kqp with the kqp.spark sink")
    result = run_spark_demo(bootstrap, rows=20000)
    _say(f"   {result}")
    return True
