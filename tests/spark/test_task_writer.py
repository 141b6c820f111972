"""One task's produce loop against a fake librdkafka producer: no broker, no Spark, no sleeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from kqp.spark.task_writer import (
    DEFAULT_DELIVERY_TIMEOUT_MS,
    FLUSH_SLACK_SECONDS,
    KafkaDeliveryError,
    delivery_timeout_seconds,
    write_messages,
)


@dataclass
class FakeError:
    text: str
    is_fatal: bool = False

    def fatal(self) -> bool:
        return self.is_fatal

    def __str__(self) -> str:
        return self.text


@dataclass
class FakeThrottle:
    throttle_time: float


class FakeProducer:
    """Queues produce() calls and reports them on poll()/flush(), like librdkafka's callbacks.

    full_times: how many produce() calls raise BufferError first (queue full);
    fail_keys: keys whose delivery report carries an error; throttles: throttle events served
    on the first poll; stuck: flush() leaves this many messages queued.
    """

    def __init__(self, config: dict[str, Any], *, full_times: int = 0, fail_keys: frozenset[bytes] = frozenset(),
                 throttles: tuple[float, ...] = (), fatal: str | None = None, stuck: int = 0) -> None:
        self.config = config
        self.full_times = full_times
        self.fail_keys = fail_keys
        self.throttles = list(throttles)
        self.fatal = fatal
        self.stuck = stuck
        self.queue: list[tuple[str, dict[str, Any]]] = []
        self.produced: list[tuple[str, dict[str, Any]]] = []
        self.polls: list[float] = []
        self.flush_timeout: float | None = None

    def produce(self, topic: str, **kwargs: Any) -> None:
        if self.full_times:
            self.full_times -= 1
            raise BufferError("Local: Queue full")
        self.queue.append((topic, kwargs))
        self.produced.append((topic, kwargs))

    def _serve(self) -> None:
        for event in self.throttles:
            self.config["throttle_cb"](FakeThrottle(event))
        self.throttles = []
        if self.fatal:
            self.config["error_cb"](FakeError(self.fatal, is_fatal=True))
            self.fatal = None
        while self.queue:
            _, kwargs = self.queue.pop(0)
            err = FakeError("Broker: Message too large") if kwargs["key"] in self.fail_keys else None
            self.config["on_delivery"](err, None)

    def poll(self, timeout: float) -> int:
        self.polls.append(timeout)
        self._serve()
        return 0

    def flush(self, timeout: float) -> int:
        self.flush_timeout = timeout
        self._serve()
        return self.stuck


def messages(n: int) -> list[tuple[str, bytes, bytes, None, None]]:
    return [("t", str(i).encode(), b"v" * 10, None, None) for i in range(n)]


def run(msgs: list[Any], config: dict[str, str] | None = None, **fake: Any) -> tuple[Any, FakeProducer]:
    made: list[FakeProducer] = []

    def factory(cfg: dict[str, Any]) -> FakeProducer:
        made.append(FakeProducer(cfg, **fake))
        return made[0]

    ticks = iter([10.0, 12.5])
    stats = write_messages(msgs, config or {"bootstrap.servers": "b:1"}, producer_factory=factory,
                           clock=lambda: next(ticks))
    return stats, made[0]


def test_every_row_is_produced_and_acknowledged() -> None:
    stats, producer = run(messages(5))
    assert (stats.rows, stats.delivered, stats.errors) == (5, 5, 0)
    # 5 rows x (key of 1 byte + 10-byte value)
    assert stats.bytes == 55
    assert stats.seconds == 2.5  # 12.5 - 10.0 from the injected clock
    assert [kw["key"] for _, kw in producer.produced] == [b"0", b"1", b"2", b"3", b"4"]
    # The producer's config carries the job's properties plus the three callbacks.
    assert producer.config["bootstrap.servers"] == "b:1"
    assert {"on_delivery", "error_cb", "throttle_cb"} <= set(producer.config)


def test_headers_and_partition_are_passed_only_when_set() -> None:
    _, producer = run([("t", b"k", b"v", [("h", b"x")], 2), ("u", None, b"v", None, None)])
    assert producer.produced == [
        ("t", {"key": b"k", "value": b"v", "headers": [("h", b"x")], "partition": 2}),
        ("u", {"key": None, "value": b"v"}),
    ]


def test_a_full_queue_is_waited_out_not_dropped() -> None:
    stats, producer = run(messages(3), full_times=4)
    assert stats.rows == stats.delivered == 3
    assert len(producer.produced) == 3
    # Four BufferErrors, four waits of QUEUE_FULL_POLL_SECONDS, plus one poll(0) per message.
    assert sorted(producer.polls, reverse=True)[:4] == [0.05] * 4


def test_a_delivery_failure_fails_the_task_and_stops_producing() -> None:
    with pytest.raises(KafkaDeliveryError) as info:
        run(messages(10), fail_keys=frozenset({b"2"}))
    text = str(info.value)
    assert "1 Kafka delivery error(s)" in text
    assert "Message too large" in text
    # Rows 0..2 were queued; the poll after row 2 served the failure, so row 3 was never produced.
    assert "(2 of 3 rows delivered)" in text


def test_a_fatal_producer_error_fails_the_task() -> None:
    with pytest.raises(KafkaDeliveryError, match="fatal producer error: idempotence broken"):
        run(messages(2), fatal="idempotence broken")


def test_non_fatal_errors_are_left_to_librdkafkas_retries() -> None:
    made: list[FakeProducer] = []

    def factory(cfg: dict[str, Any]) -> FakeProducer:
        made.append(FakeProducer(cfg))
        cfg["error_cb"](FakeError("all brokers down", is_fatal=False))
        return made[0]

    stats = write_messages(messages(2), {"bootstrap.servers": "b:1"}, producer_factory=factory)
    assert stats.errors == 0 and stats.delivered == 2


def test_messages_left_after_flush_fail_the_task() -> None:
    with pytest.raises(KafkaDeliveryError, match="3 messages still queued"):
        run(messages(3), stuck=3)


def test_throttle_events_are_summed_for_the_commit_message() -> None:
    # librdkafka also reports the end of throttling with throttle_time 0: not counted.
    stats, _ = run(messages(1), throttles=(0.4, 1.1, 0.0))
    assert stats.throttle_events == 2
    assert stats.throttle_seconds == pytest.approx(1.5)


def test_flush_waits_for_the_delivery_timeout_plus_slack() -> None:
    _, producer = run(messages(1), {"bootstrap.servers": "b:1", "message.timeout.ms": "5000"})
    assert producer.flush_timeout == 5.0 + FLUSH_SLACK_SECONDS
    assert delivery_timeout_seconds({"delivery.timeout.ms": "7000"}) == 7.0
    assert delivery_timeout_seconds({}) == DEFAULT_DELIVERY_TIMEOUT_MS / 1000
