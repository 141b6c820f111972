"""One Spark task's write: an idempotent librdkafka producer, every message delivered or the task fails.

A task owns its producer from start to flush, so a task's success means every one of its rows was
acknowledged by Kafka (acks=all, which idempotence implies), and a task's failure is Spark's signal
to retry it. Delivery failures arrive asynchronously in librdkafka's delivery reports; they are
counted as they are served, producing stops at the first one, and the task raises
KafkaDeliveryError after the queue has drained, so Spark sees a task failure, never a silent loss.

A task that is throttled (by kqp or a broker) keeps going: librdkafka honours `throttle_time_ms`
(KIP-219) and backs off per broker; when its queue fills, `produce` raises BufferError and this
loop serves callbacks until there is room. Throttle events are counted for the commit message, so
the driver and `kqp demo --spark` can say how much throttling the job saw.

The producer factory is injected so the loop is tested with a fake producer, no broker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kqp.spark.rows import Message

ProducerFactory = Callable[[dict[str, Any]], Any]

# How long produce() waits for queue space before trying again; short so fatal errors surface fast.
QUEUE_FULL_POLL_SECONDS = 0.05
# librdkafka's default message.timeout.ms: after it every queued message has a delivery report.
DEFAULT_DELIVERY_TIMEOUT_MS = 300_000
# Slack on top of the delivery timeout before flush() is declared stuck.
FLUSH_SLACK_SECONDS = 30.0
# Keep the first few error texts; a dead broker would otherwise fill memory with identical lines.
MAX_ERROR_TEXTS = 5


class KafkaDeliveryError(RuntimeError):
    """Some of a task's messages were not delivered: the task must fail so Spark retries it."""


@dataclass(slots=True)
class TaskStats:
    """What a task reports in its commit message."""

    rows: int = 0
    bytes: int = 0
    delivered: int = 0
    throttle_events: int = 0
    throttle_seconds: float = 0.0
    seconds: float = 0.0
    errors: int = 0
    error_texts: list[str] = field(default_factory=list)


def _default_factory(config: dict[str, Any]) -> Any:
    from confluent_kafka import Producer  # imported late: the driver need not have it

    return Producer(config)


def delivery_timeout_seconds(config: Mapping[str, str]) -> float:
    # delivery.timeout.ms is librdkafka's alias of message.timeout.ms.
    raw = config.get("message.timeout.ms") or config.get("delivery.timeout.ms")
    millis = int(raw) if raw else DEFAULT_DELIVERY_TIMEOUT_MS
    return millis / 1000.0


def write_messages(
    messages: Iterable[Message],
    producer_config: Mapping[str, str],
    *,
    producer_factory: ProducerFactory = _default_factory,
    clock: Callable[[], float] = time.monotonic,
) -> TaskStats:
    """Produce every message and wait for all delivery reports; raise KafkaDeliveryError on any failure."""
    stats = TaskStats()
    started = clock()

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            stats.delivered += 1
        else:
            _record_error(stats, f"delivery failed: {err}")

    def on_error(err: Any) -> None:
        # Transport errors are retried by librdkafka; only a fatal error (idempotence broken)
        # means messages can no longer be delivered in order exactly once.
        if getattr(err, "fatal", lambda: False)():
            _record_error(stats, f"fatal producer error: {err}")

    def on_throttle(event: Any) -> None:
        if event.throttle_time > 0:
            stats.throttle_events += 1
            stats.throttle_seconds += event.throttle_time

    config: dict[str, Any] = dict(producer_config)
    config.update(on_delivery=on_delivery, error_cb=on_error, throttle_cb=on_throttle)
    producer = producer_factory(config)
    try:
        for topic, key, value, headers, partition in messages:
            if stats.errors:
                break  # stop feeding a producer that has started failing; drain, then raise
            kwargs: dict[str, Any] = {"key": key, "value": value}
            if headers:
                kwargs["headers"] = headers
            if partition is not None:
                kwargs["partition"] = partition
            if not _produce(producer, topic, kwargs, stats):
                break
            stats.rows += 1
            stats.bytes += len(key or b"") + len(value or b"")
            producer.poll(0)
        remaining = producer.flush(delivery_timeout_seconds(producer_config) + FLUSH_SLACK_SECONDS)
    finally:
        stats.seconds = clock() - started
    if remaining:
        _record_error(stats, f"{remaining} messages still queued after the delivery timeout")
    if stats.errors:
        raise KafkaDeliveryError(
            f"{stats.errors} Kafka delivery error(s) in this task "
            f"({stats.delivered} of {stats.rows} rows delivered): " + "; ".join(stats.error_texts)
        )
    return stats


def _produce(producer: Any, topic: str, kwargs: dict[str, Any], stats: TaskStats) -> bool:
    """Queue one message, waiting for room; False if a delivery error showed up meanwhile."""
    while True:
        try:
            producer.produce(topic, **kwargs)
            return True
        except BufferError:
            # Queue full (throttled or slow broker): serve callbacks until there is room.
            producer.poll(QUEUE_FULL_POLL_SECONDS)
            if stats.errors:
                return False


def _record_error(stats: TaskStats, text: str) -> None:
    stats.errors += 1
    if len(stats.error_texts) < MAX_ERROR_TEXTS:
        stats.error_texts.append(text)
