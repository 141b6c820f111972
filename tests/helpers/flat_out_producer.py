"""Issue 20's producer: kafka-python, pinned to an old `api_version`, sending 1 kB records flat out.

Usage: python flat_out_producer.py BOOTSTRAP TOPIC CLIENT_ID SECONDS PARTITIONS [API_VERSION]

The case of the issue: 5 requests in flight, `request_timeout_ms=5000`, `retries=0`, records of
1 kB as fast as the client takes them, round robin over PARTITIONS partitions (so one Produce
carries a batch for each, ~PARTITIONS x 16 kB), pinned to API_VERSION (dotted, `0.11` by default:
Produce v3, which predates client-side throttling, and no ApiVersions request at all). It runs
under kafka-python 3 and under a kafka-python 2.x fork alike, each in the interpreter of its own
environment (the two share the import name `kafka`: `helpers.old_kafka_python`), so this file imports
nothing from the test suite.

What is queued in the client is bounded (OUTSTANDING records: a few requests' worth, so the five
in-flight slots stay full) by waiting for the oldest record, never by dropping one. The one JSON
object printed on stdout says what the client saw: records sent, acknowledged, failed by a request
timeout (the client's own futures) and otherwise, kafka-python's own "timed out" log lines, and the
largest throttle it recorded. Times are `time.monotonic()`, the clock the wire taps read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from typing import Any

VALUE_BYTES = 1000
BATCH_BYTES = 16384
IN_FLIGHT = 5
REQUEST_TIMEOUT_MS = 5000
OUTSTANDING = 400               # records queued or in flight at most (~6 requests of 4 x 16 kB)
DRAIN_SECONDS = 30.0


class TimeoutLines(logging.Handler):
    """Counts kafka-python's own reports of a request that timed out."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "timed out" in message.lower() or "RequestTimedOut" in message:
            self.count += 1


def value(client_id: str, sequence: int) -> bytes:
    head = f"{client_id}-{sequence:08d}-".encode()
    return head + b"x" * max(0, VALUE_BYTES - len(head))


def run(bootstrap: str, topic: str, client_id: str, seconds: float, partitions: int,
        api_version: tuple[int, ...], report: dict[str, Any]) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError, RequestTimedOutError

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, client_id=client_id, api_version=api_version, acks=1, linger_ms=5,
        batch_size=BATCH_BYTES, request_timeout_ms=REQUEST_TIMEOUT_MS, retries=0,
        max_in_flight_requests_per_connection=IN_FLIGHT, max_block_ms=30000)
    futures: list[Any] = []
    try:
        report["started"] = time.monotonic()
        deadline = report["started"] + seconds
        while time.monotonic() < deadline:
            sent = len(futures)
            if sent >= OUTSTANDING:
                with contextlib.suppress(Exception):   # read again, and reported, below
                    futures[sent - OUTSTANDING].get(timeout=max(0.1, deadline - time.monotonic()))
            futures.append(producer.send(topic, value(client_id, sent), partition=sent % partitions))
        report["offered_until"] = time.monotonic()
        with contextlib.suppress(KafkaTimeoutError):
            producer.flush(timeout=DRAIN_SECONDS)
        for future in futures:
            if not future.is_done:
                report["unfinished"] += 1
            elif future.failed():
                exc = future.exception
                if isinstance(exc, KafkaTimeoutError | RequestTimedOutError):
                    report["timeouts"] += 1
                else:
                    report["errors"] += 1
                    if len(report["error_samples"]) < 5:
                        report["error_samples"].append(repr(exc))
            else:
                report["acked"] += 1
        report["sent"] = len(futures)
        report["finished"] = time.monotonic()
        seen = [float(v) for group in producer.metrics().values() for k, v in group.items()
                if k == "throttle-time-max" and v == v]
        report["throttle_max_ms"] = max(seen, default=0.0)
    finally:
        producer.close(timeout=10)


def main(argv: list[str]) -> int:
    bootstrap, topic, client_id, seconds, partitions = argv[1], argv[2], argv[3], float(argv[4]), int(argv[5])
    api_version = tuple(int(part) for part in (argv[6] if len(argv) > 6 else "0.11").split("."))
    import kafka

    lines = TimeoutLines()
    logging.getLogger("kafka").addHandler(lines)
    report: dict[str, Any] = {"kafka_python": kafka.__version__, "client_id": client_id, "sent": 0, "acked": 0,
                              "timeouts": 0, "errors": 0, "unfinished": 0, "error_samples": []}
    try:
        run(bootstrap, topic, client_id, seconds, partitions, api_version, report)
    except Exception as exc:
        report["errors"] += 1
        report["error_samples"].append(f"client failed: {exc!r}")
    report["timeout_lines"] = lines.count
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
