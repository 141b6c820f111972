"""A Kafka-0.11-era (or 0.10) client: kafka-python 2.x pinned to an old `api_version`, run as a script.

Usage: python kafka_python2_client.py produce|consume BOOTSTRAP TOPIC CLIENT_ID COUNT [API_VERSION]

API_VERSION is dotted, `0.11` by default; `0.10` speaks Kafka 0.10.0's versions (Produce v2 with
magic 1 message sets, Fetch v2, ListOffsets v0, Metadata v1), which Kafka 4 no longer serves.

Run only by the interpreter of a virtual environment that holds kafka-python 2.x
(`helpers.old_kafka_python`): its import name `kafka` is the same as kafka-python 3's, which kqp
and the test process use, so the two can never share one interpreter. This file imports nothing
from the test suite.

With `api_version=(0, 11)` kafka-python 2.x skips version negotiation and speaks Kafka 0.11's
request versions (Produce v3, Fetch v5, Metadata v4, ListOffsets v2). The consumer starts from the
partition's beginning by asking for it (ListOffsets), as a consumer with no committed offset does. It reads
throttle_time_ms but does not back off by itself (its client-side throttling starts at (2, 0),
KIP-219's release), so, like a producer from 2017, only the proxy's muting holds it.

Both modes use a 5 s request timeout and no retries, so a request that times out is reported,
never silently resent. The one JSON object printed on stdout holds what the client saw:
value ids acknowledged or received, errors, request timeouts (the client's own futures, and the
"timed out" lines kafka-python logs when it gives up on a connection), and the largest throttle
it recorded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from typing import Any

REQUEST_TIMEOUT_MS = 5000
VALUE_BYTES = 1000
BATCH_BYTES = 16384
LOCAL_QUEUE = 64                 # messages the producer may have unacknowledged (~64 KB)
FETCH_PARTITION_BYTES = 32768    # small fetches, so the rate is judged on many responses
RUN_SECONDS = 60.0               # bound on either run, whatever happens


class TimeoutLines(logging.Handler):
    """Counts kafka-python's own reports of a request that timed out."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "timed out" in message.lower() or "RequestTimedOut" in message:
            self.lines.append(message)


def value(client_id: str, sequence: int) -> bytes:
    head = f"{client_id}-{sequence:08d}-".encode()
    return head + b"x" * max(0, VALUE_BYTES - len(head))


def value_id(raw: bytes) -> str:
    return raw.rstrip(b"x").rstrip(b"-").decode()


def throttle_max(metrics: dict[str, dict[str, Any]]) -> float:
    seen = [float(v) for group in metrics.values() for k, v in group.items()
            if k == "throttle-time-max" and v == v]
    return max(seen, default=0.0)


def is_timeout(exc: BaseException) -> bool:
    from kafka.errors import KafkaTimeoutError, RequestTimedOutError

    return isinstance(exc, KafkaTimeoutError | RequestTimedOutError)


def produce(bootstrap: str, topic: str, client_id: str, count: int, api_version: tuple[int, ...],
            report: dict[str, Any]) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, client_id=client_id, api_version=api_version, acks=1,
        linger_ms=5, batch_size=BATCH_BYTES, request_timeout_ms=REQUEST_TIMEOUT_MS, retries=0,
        max_in_flight_requests_per_connection=5, max_block_ms=30000)
    futures = []
    try:
        report["started"] = time.monotonic()
        deadline = report["started"] + RUN_SECONDS
        for sequence in range(count):
            left = deadline - time.monotonic()
            if left <= 0:
                report["errors"].append(f"gave up after {RUN_SECONDS:.0f}s with {sequence} of {count} sent")
                break
            # kafka-python 2.x no longer bounds its accumulator: wait for the oldest message once
            # LOCAL_QUEUE are outstanding, so the client offers steadily and no backlog is left.
            if sequence >= LOCAL_QUEUE:
                with contextlib.suppress(Exception):   # read again, and reported, below
                    futures[sequence - LOCAL_QUEUE].get(timeout=left)
            futures.append(producer.send(topic, value(client_id, sequence), partition=0))
        with contextlib.suppress(KafkaTimeoutError):   # what is left unfinished is reported below
            producer.flush(timeout=max(1.0, deadline - time.monotonic()))
        for sequence, future in enumerate(futures):
            if not future.is_done:
                report["errors"].append(f"message {sequence} unfinished after {RUN_SECONDS:.0f}s")
            elif future.failed():
                exc = future.exception
                report["timeouts" if is_timeout(exc) else "errors"].append(repr(exc))
            else:
                report["acked"].append(value_id(value(client_id, sequence)))
        report["finished"] = time.monotonic()
        report["throttle_max_ms"] = throttle_max(producer.metrics())
    finally:
        producer.close(timeout=10)


def consume(bootstrap: str, topic: str, client_id: str, count: int, api_version: tuple[int, ...],
            report: dict[str, Any]) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, client_id=client_id, api_version=api_version, group_id=None,
        enable_auto_commit=False, request_timeout_ms=REQUEST_TIMEOUT_MS,
        max_partition_fetch_bytes=FETCH_PARTITION_BYTES, fetch_max_wait_ms=100)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        report["started"] = time.monotonic()
        deadline = report["started"] + RUN_SECONDS
        while len(report["received"]) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                report["received"].extend(value_id(r.value) for r in records)
        report["finished"] = time.monotonic()
        report["throttle_max_ms"] = throttle_max(consumer.metrics())
    finally:
        consumer.close()


def main(argv: list[str]) -> int:
    mode, bootstrap, topic, client_id, count = argv[1], argv[2], argv[3], argv[4], int(argv[5])
    api_version = tuple(int(part) for part in (argv[6] if len(argv) > 6 else "0.11").split("."))
    import kafka

    timeouts = TimeoutLines()
    logging.getLogger("kafka").addHandler(timeouts)
    report: dict[str, Any] = {"kafka_python": kafka.__version__, "acked": [], "received": [], "errors": [],
                              "timeouts": [], "throttle_max_ms": None}
    try:
        {"produce": produce, "consume": consume}[mode](bootstrap, topic, client_id, count, api_version, report)
    except Exception as exc:
        report["errors"].append(f"client failed: {exc!r}")
    report["timeout_lines"] = timeouts.lines
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
