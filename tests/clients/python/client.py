"""The Python Kafka clients behind the command line every family under tests/clients/ shares.

Usage: python client.py LIBRARY produce|consume|mutate ARGS... (tests/clients/README.md), LIBRARY
one of `confluent-kafka` (librdkafka), `kcat` (Debian's kcat, librdkafka too, fed records on its
stdin), `kafka-python` (3.x, or 2.x when run by the interpreter of helpers.old_kafka_python's
environment: both import `kafka`) and `aiokafka`. It imports nothing from the test suite, so any
interpreter with its library installed runs it.

Beyond the contract: `--outstanding-bytes N` bounds what is offered but not yet acknowledged
(default 4 x `--batch-bytes`, as the Java program), so a test can let a client with 1 MB batches
pipeline a few of them; `--batch-bytes 0` leaves the library's own batch size (librdkafka's 1 MB).
`produce` also reports `offer_start`/`offer_end` and `consume` `consume_start`/`consume_end`, in
`time.monotonic()`'s clock (the wire taps'). Throttle figures: librdkafka's statistics (the largest
`brokers.*.throttle.max`, the mean of the windows' averages), kafka-python's `*-throttle-time-max`
and `-avg` metrics; aiokafka and kcat record none (null). `mutate BOOTSTRAP PREFIX CLIENT_ID SECONDS
[--partitions 2]` creates topics PREFIX-<n>, one CreateTopics request after another (a topic refused
with THROTTLING_QUOTA_EXCEEDED is asked again), and reports `created`, [time, partitions] pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

MAX_ERRORS = 5
DRAIN_SECONDS = 60.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="client.py")
    p.add_argument("library", choices=("confluent-kafka", "kcat", "kafka-python", "aiokafka"))
    modes = p.add_subparsers(dest="mode", required=True)
    produce = modes.add_parser("produce")
    for name in ("bootstrap", "topic", "client_id"):
        produce.add_argument(name)
    produce.add_argument("seconds", type=float)
    produce.add_argument("--record-bytes", type=int, default=1000)
    produce.add_argument("--batch-bytes", type=int, default=16384)
    produce.add_argument("--linger-ms", type=int, default=5)
    produce.add_argument("--acks", default="all", choices=("all", "1", "0"))
    produce.add_argument("--compression", default="none")
    produce.add_argument("--max-records", type=int, default=None)
    produce.add_argument("--idempotent", action="store_true")
    produce.add_argument("--outstanding-bytes", type=int, default=None)
    consume = modes.add_parser("consume")
    for name in ("bootstrap", "topic", "client_id", "group"):
        consume.add_argument(name)
    consume.add_argument("count", type=int)
    consume.add_argument("timeout", type=float)
    mutate = modes.add_parser("mutate")
    for name in ("bootstrap", "prefix", "client_id"):
        mutate.add_argument(name)
    mutate.add_argument("seconds", type=float)
    mutate.add_argument("--partitions", type=int, default=2)
    for sub in (produce, consume, mutate):
        sub.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    return p


def _conf(items: list[str]) -> dict[str, Any]:
    """--conf values: ints and floats as numbers, true/false as booleans, the rest as strings;
    kafka-python's `api_version=0.11` as the tuple it takes."""
    out: dict[str, Any] = {}
    for item in items:
        key, _, raw = item.partition("=")
        value: Any = raw
        if key == "api_version":
            value = tuple(int(part) for part in raw.split("."))
        elif raw in ("true", "false"):
            value = raw == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(raw)
                    break
                except ValueError:
                    pass
        out[key] = value
    return out


class Report:
    """What a run saw; `errors` and the counters are updated from the clients' callback threads."""

    def __init__(self, client: str, version: str) -> None:
        self.lock = threading.Lock()
        self.out: dict[str, Any] = {"client": client, "version": version, "throttle_ms_max": None,
                                    "throttle_ms_avg": None}
        self.errors: list[str] = []
        self.acked = self.failed = self.timeouts = 0

    def error(self, text: str, timeout: bool = False) -> None:
        with self.lock:
            self.failed += 1
            self.timeouts += timeout
            if text not in self.errors and len(self.errors) < MAX_ERRORS:
                self.errors.append(text)

    def ack(self) -> None:
        with self.lock:
            self.acked += 1


class Outstanding:
    """Bytes offered and not yet answered, bounded by waiting (never by dropping)."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.held = 0
        self.cond = threading.Condition()

    def acquire(self, n: int, until: float, wait: Callable[[], object] | None = None) -> bool:
        """Take `n` bytes, waiting until `until` at most; `wait`: what to do meanwhile instead of
        sleeping (librdkafka runs its delivery callbacks only inside `poll`)."""
        if wait is not None:
            while not self.acquire(n, time.monotonic()):
                if time.monotonic() >= until:
                    return False
                wait()
            return True
        with self.cond:
            while self.held and self.held + n > self.bound:
                left = until - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.05))
            self.held += n
            return True

    def release(self, n: int) -> None:
        with self.cond:
            self.held -= n
            self.cond.notify_all()


def _value(size: int, n: int) -> bytes:
    head = f"v-{n}-".encode()
    return head + b"x" * max(0, size - len(head))


# ---- librdkafka (confluent-kafka) ----------------------------------------------------------------

def _rdkafka_stats(report: Report) -> Callable[[str], None]:
    averages: list[float] = []

    def on_stats(raw: str) -> None:
        stats = json.loads(raw)
        for broker in stats.get("brokers", {}).values():
            throttle = broker.get("throttle") or {}
            if throttle.get("cnt"):
                with report.lock:
                    previous = report.out["throttle_ms_max"] or 0
                    report.out["throttle_ms_max"] = max(previous, float(throttle["max"]))
                    averages.append(float(throttle["avg"]))
                    report.out["throttle_ms_avg"] = sum(averages) / len(averages)
    return on_stats


def rdkafka_produce(a: argparse.Namespace, report: Report) -> None:
    from confluent_kafka import KafkaError, Producer

    conf: dict[str, Any] = {"bootstrap.servers": a.bootstrap, "client.id": a.client_id, "linger.ms": a.linger_ms,
                            "acks": -1 if a.acks == "all" else int(a.acks), "compression.type": a.compression,
                            "enable.idempotence": a.idempotent, "statistics.interval.ms": 1000,
                            "stats_cb": _rdkafka_stats(report), "log_level": 3}
    if a.batch_bytes:
        conf["batch.size"] = a.batch_bytes
    conf.update(_conf(a.conf))
    producer = Producer(conf)
    timed_out = {KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}
    window = Outstanding(a.outstanding_bytes or 4 * max(a.batch_bytes or 1_000_000, a.record_bytes))

    def delivered(err: Any, msg: Any) -> None:
        window.release(a.record_bytes)
        if err is None:
            report.ack()
        else:
            report.error(str(err), err.code() in timed_out)

    producer.list_topics(a.topic, timeout=30)
    sent, start = 0, time.monotonic()
    deadline = start + a.seconds
    while (a.max_records is None or sent < a.max_records) and time.monotonic() < deadline:
        producer.poll(0)
        if not window.acquire(a.record_bytes, deadline, lambda: producer.poll(0.005)):
            break
        while True:
            try:
                producer.produce(a.topic, _value(a.record_bytes, sent), f"k-{sent}".encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        sent += 1
    end = time.monotonic()
    producer.flush(DRAIN_SECONDS)
    producer.poll(1.1)   # one more statistics callback
    report.out.update(sent=sent, offer_start=start, offer_end=end)


def rdkafka_consume(a: argparse.Namespace, report: Report) -> dict[str, Any]:
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": a.bootstrap, "client.id": a.client_id, "group.id": a.group,
            "auto.offset.reset": "earliest", "statistics.interval.ms": 1000,
            "stats_cb": _rdkafka_stats(report), "log_level": 3, **_conf(a.conf)}
    consumer = Consumer(conf)
    consumer.subscribe([a.topic])
    return _consume_loop(a, report, lambda: _rdkafka_poll(consumer), consumer.close)


def _rdkafka_poll(consumer: Any) -> list[tuple[bytes | None, int]]:
    out = []
    for msg in consumer.consume(500, 0.1):
        if msg.error() is not None:
            raise RuntimeError(str(msg.error()))
        out.append((msg.key(), len(msg.value() or b"") + len(msg.key() or b"")))
    return out


def kcat_produce(a: argparse.Namespace, report: Report) -> None:
    """kcat -P fed `key<TAB>value` lines; its queue (4 batches) bounds what is outstanding, the pipe
    blocking while it is full. Delivery failures are the lines kcat prints about them."""
    batch = a.batch_bytes or 1_000_000
    bound = a.outstanding_bytes or 4 * max(batch, a.record_bytes)
    argv = [shutil.which("kcat") or "kcat", "-P", "-b", a.bootstrap, "-t", a.topic, "-K", "\t", "-q",
            "-X", f"client.id={a.client_id}", "-X", f"linger.ms={a.linger_ms}", "-X", f"acks={a.acks}",
            "-X", f"compression.codec={a.compression}", "-X", f"queue.buffering.max.kbytes={max(1, bound // 1024)}"]
    if a.batch_bytes:
        argv += ["-X", f"batch.size={a.batch_bytes}"]
    for item in a.conf:
        argv += ["-X", item]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=err, stdout=subprocess.DEVNULL)
        assert proc.stdin is not None
        sent, start = 0, time.monotonic()
        deadline = start + a.seconds
        value = b"x" * a.record_bytes
        try:
            while (a.max_records is None or sent < a.max_records) and time.monotonic() < deadline:
                proc.stdin.write(b"k-%d\t%s\n" % (sent, value))
                sent += 1
            end = time.monotonic()
            proc.stdin.close()
            proc.wait(DRAIN_SECONDS)
        except (BrokenPipeError, subprocess.TimeoutExpired) as exc:
            report.error(repr(exc))
            end = time.monotonic()
            proc.kill()
            proc.wait()
        err.seek(0)
        for line in err.read().decode(errors="replace").splitlines():
            if "fail" in line.lower() or "error" in line.lower():
                report.error(line.strip(), "timed out" in line.lower())
        if proc.returncode not in (0, None):
            report.error(f"kcat exited with {proc.returncode}")
    report.acked = max(0, sent - report.failed)
    report.out.update(sent=sent, offer_start=start, offer_end=end)


def kcat_consume(a: argparse.Namespace, report: Report) -> dict[str, Any]:
    argv = [shutil.which("kcat") or "kcat", "-C", "-b", a.bootstrap, "-G", a.group, a.topic, "-q", "-f", "%k\n",
            "-X", f"client.id={a.client_id}", "-X", "auto.offset.reset=earliest", "-c", str(a.count)]
    for item in a.conf:
        argv += ["-X", item]
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, timeout=a.timeout, check=False)
        lines, stderr = done.stdout.splitlines(), done.stderr
    except subprocess.TimeoutExpired as exc:   # the timeout ends it, as the contract's timeout does
        lines, stderr = (exc.stdout or b"").splitlines(), exc.stderr or b""
    for line in stderr.decode(errors="replace").splitlines():
        if "error" in line.lower():
            report.error(line.strip())
    return {"consumed": len(lines), "keys_distinct": len(set(lines)), "consume_start": start,
            "consume_end": time.monotonic()}


def rdkafka_mutate(a: argparse.Namespace, report: Report) -> dict[str, Any]:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": a.bootstrap, "client.id": a.client_id, "log_level": 3,
                         **_conf(a.conf)})
    return _mutate_loop(a, report, lambda name: admin.create_topics(
        [NewTopic(name, a.partitions, 1)], operation_timeout=30, request_timeout=60)[name].result(90),
        lambda exc: bool(exc.args) and isinstance(exc.args[0], KafkaError)
        and exc.args[0].code() == KafkaError.THROTTLING_QUOTA_EXCEEDED)


def _mutate_loop(a: argparse.Namespace, report: Report, create: Callable[[str], object],
                 throttled: Callable[[Exception], bool]) -> dict[str, Any]:
    created: list[list[float]] = []
    refused, n, start = 0, 0, time.monotonic()
    while time.monotonic() < start + a.seconds:
        try:
            create(f"{a.prefix}-{n}")
        except Exception as exc:
            if throttled(exc):
                refused += 1
                time.sleep(0.01)
                continue
            report.error(repr(exc))
            if len(report.errors) >= MAX_ERRORS:
                break
        else:
            created.append([time.monotonic(), a.partitions])
        n += 1
    return {"created": created, "refused_89": refused, "offer_start": start, "offer_end": time.monotonic()}


# ---- kafka-python (3.x and 2.x) ------------------------------------------------------------------

def _kafka_python_throttle(report: Report, metrics: dict[str, dict[str, Any]], group: str, prefix: str) -> None:
    found = metrics.get(group, {})
    top, avg = found.get(f"{prefix}-max"), found.get(f"{prefix}-avg")
    if top is not None and top == top and top > float("-inf"):   # NaN and -inf before any response
        report.out["throttle_ms_max"] = float(top)
        report.out["throttle_ms_avg"] = float(avg) if avg == avg else None


def kafka_python_produce(a: argparse.Namespace, report: Report) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError, RequestTimedOutError

    conf: dict[str, Any] = {"bootstrap_servers": a.bootstrap, "client_id": a.client_id, "linger_ms": a.linger_ms,
                            "acks": "all" if a.acks == "all" else int(a.acks),
                            "compression_type": None if a.compression == "none" else a.compression,
                            # one sample over the whole run, so max and avg cover all of it
                            "metrics_sample_window_ms": 3_600_000}
    if a.batch_bytes:
        conf["batch_size"] = a.batch_bytes
    if a.idempotent:
        conf["enable_idempotence"] = True
    conf.update(_conf(a.conf))
    producer = KafkaProducer(**conf)
    window = Outstanding(a.outstanding_bytes or 4 * max(a.batch_bytes or 16384, a.record_bytes))

    def done(_: Any) -> None:
        window.release(a.record_bytes)
        report.ack()

    def failed(exc: BaseException) -> None:
        window.release(a.record_bytes)
        report.error(repr(exc), isinstance(exc, (KafkaTimeoutError, RequestTimedOutError)))

    producer.partitions_for(a.topic)
    sent, start = 0, time.monotonic()
    deadline = start + a.seconds
    while (a.max_records is None or sent < a.max_records) and time.monotonic() < deadline:
        if not window.acquire(a.record_bytes, deadline):
            break
        future = producer.send(a.topic, key=f"k-{sent}".encode(), value=_value(a.record_bytes, sent))
        future.add_callback(done).add_errback(failed)
        sent += 1
    end = time.monotonic()
    producer.flush(DRAIN_SECONDS)
    _kafka_python_throttle(report, producer.metrics(), "producer-metrics", "produce-throttle-time")
    producer.close(5)
    report.out.update(sent=sent, offer_start=start, offer_end=end)


def kafka_python_mutate(a: argparse.Namespace, report: Report) -> dict[str, Any]:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import ThrottlingQuotaExceededError

    admin = KafkaAdminClient(bootstrap_servers=a.bootstrap, client_id=a.client_id, **_conf(a.conf))

    def create(name: str) -> None:
        result = admin.create_topics([NewTopic(name, a.partitions, 1)], timeout_ms=60_000)
        for topic in getattr(result, "topic_errors", None) or getattr(result, "topics", None) or ():
            code = topic[1] if isinstance(topic, tuple) else getattr(topic, "error_code", 0)
            if code == ThrottlingQuotaExceededError.errno:
                raise ThrottlingQuotaExceededError()
            if code:
                raise RuntimeError(f"CreateTopics error {code}")
    try:
        return _mutate_loop(a, report, create, lambda exc: isinstance(exc, ThrottlingQuotaExceededError))
    finally:
        admin.close()


def kafka_python_consume(a: argparse.Namespace, report: Report) -> dict[str, Any]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(a.topic, bootstrap_servers=a.bootstrap, client_id=a.client_id, group_id=a.group,
                             auto_offset_reset="earliest", metrics_sample_window_ms=3_600_000, **_conf(a.conf))

    def poll() -> list[tuple[bytes | None, int]]:
        found = consumer.poll(100)
        return [(r.key, (r.serialized_key_size or 0) + max(0, r.serialized_value_size))
                for records in found.values() for r in records]

    def close() -> None:
        _kafka_python_throttle(report, consumer.metrics(), "consumer-fetch-manager-metrics", "fetch-throttle-time")
        consumer.close()
    return _consume_loop(a, report, poll, close)


# ---- aiokafka ------------------------------------------------------------------------------------

async def _aiokafka_produce(a: argparse.Namespace, report: Report) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaTimeoutError, RequestTimedOutError

    conf: dict[str, Any] = {"bootstrap_servers": a.bootstrap, "client_id": a.client_id, "linger_ms": a.linger_ms,
                            "acks": "all" if a.acks == "all" else int(a.acks),
                            "compression_type": None if a.compression == "none" else a.compression,
                            "enable_idempotence": a.idempotent}
    if a.batch_bytes:
        conf["max_batch_size"] = a.batch_bytes
    conf.update(_conf(a.conf))
    producer = AIOKafkaProducer(**conf)
    await producer.start()
    bound = a.outstanding_bytes or 4 * max(a.batch_bytes or 16384, a.record_bytes)
    outstanding: deque[asyncio.Future[Any]] = deque()

    def settle(future: asyncio.Future[Any]) -> None:
        exc = future.exception()
        if exc is None:
            report.ack()
        else:
            report.error(repr(exc), isinstance(exc, (KafkaTimeoutError, RequestTimedOutError)))

    try:
        await producer.partitions_for(a.topic)
        sent, start = 0, time.monotonic()
        deadline = start + a.seconds
        while (a.max_records is None or sent < a.max_records) and time.monotonic() < deadline:
            while outstanding and (len(outstanding) + 1) * a.record_bytes > bound:
                await asyncio.wait([outstanding.popleft()])
            future = await producer.send(a.topic, key=f"k-{sent}".encode(), value=_value(a.record_bytes, sent))
            future.add_done_callback(settle)
            outstanding.append(future)
            sent += 1
        end = time.monotonic()
        if outstanding:
            await asyncio.wait(list(outstanding), timeout=DRAIN_SECONDS)
    finally:
        await producer.stop()
    report.out.update(sent=sent, offer_start=start, offer_end=end)


async def _aiokafka_consume(a: argparse.Namespace, report: Report) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(a.topic, bootstrap_servers=a.bootstrap, client_id=a.client_id, group_id=a.group,
                                auto_offset_reset="earliest", **_conf(a.conf))
    await consumer.start()
    consumed, keys, start = 0, set(), time.monotonic()
    try:
        while consumed < a.count and time.monotonic() < start + a.timeout:
            found = await consumer.getmany(timeout_ms=100)
            for records in found.values():
                for r in records:
                    consumed += 1
                    keys.add(r.key)
        end = time.monotonic()
    except Exception as exc:
        report.error(repr(exc))
        end = time.monotonic()
    finally:
        await consumer.stop()
    return {"consumed": consumed, "keys_distinct": len(keys), "consume_start": start, "consume_end": end}


# ---- shared --------------------------------------------------------------------------------------

def _consume_loop(a: argparse.Namespace, report: Report, poll: Callable[[], list[tuple[bytes | None, int]]],
                  close: Callable[[], None]) -> dict[str, Any]:
    consumed, keys, start = 0, set(), time.monotonic()
    try:
        while consumed < a.count and time.monotonic() < start + a.timeout:
            try:
                for key, _size in poll():
                    consumed += 1
                    keys.add(key)
            except Exception as exc:
                report.error(repr(exc))
                if len(report.errors) >= MAX_ERRORS:
                    break
        end = time.monotonic()
    finally:
        close()
    return {"consumed": consumed, "keys_distinct": len(keys), "consume_start": start, "consume_end": end}


def _version(library: str) -> str:
    if library == "kcat":
        done = subprocess.run([shutil.which("kcat") or "kcat", "-V"], capture_output=True, text=True, check=False)
        found = [line for line in done.stdout.splitlines() if line.startswith("Version ")]
        return " ".join(found[0].split()[1:2]) if found else "unknown"
    if library == "confluent-kafka":
        import confluent_kafka

        return f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"
    module = __import__("kafka" if library == "kafka-python" else "aiokafka")
    return str(module.__version__)


def main(argv: list[str]) -> int:
    a = _parser().parse_args(argv)
    report = Report(a.library, _version(a.library))
    began = time.monotonic()
    if a.mode == "produce":
        run = {"confluent-kafka": rdkafka_produce, "kcat": kcat_produce, "kafka-python": kafka_python_produce,
               "aiokafka": lambda a, r: asyncio.run(_aiokafka_produce(a, r))}[a.library]
        run(a, report)
        report.out.update(acked=report.acked, failed=report.failed, timeouts=report.timeouts)
    elif a.mode == "consume":
        consume = {"confluent-kafka": rdkafka_consume, "kcat": kcat_consume, "kafka-python": kafka_python_consume,
                   "aiokafka": lambda a, r: asyncio.run(_aiokafka_consume(a, r))}[a.library]
        report.out.update(consume(a, report))
    else:
        mutate = {"confluent-kafka": rdkafka_mutate, "kafka-python": kafka_python_mutate}[a.library]
        report.out.update(mutate(a, report))
    report.out.update(errors=report.errors, seconds=time.monotonic() - began)
    print(json.dumps(report.out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
