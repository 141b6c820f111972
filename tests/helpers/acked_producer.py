"""An idempotent acks=all producer that writes down what was acknowledged, for fault tests.

"Nothing acknowledged is lost or doubled" is checked against what the client was told: every
delivery report is kept, and a test compares the acknowledged values with what the upstream holds.
Values carry a sequence number (`clients.keyed_messages`), so duplicates and gaps name messages.
`BackgroundProducer` does the same from a thread of its own until stopped, for tests that act on
the cluster or the consumers meanwhile (a broker killed, a group rebalancing).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Message, Producer

from .clients import keyed_messages

# Retries are librdkafka's business here (idempotence retries without limit until the message
# times out): a fault must cost a retry, never a message.
PRODUCER_CONF: dict[str, object] = {
    "enable.idempotence": True, "acks": "all", "linger.ms": 5, "message.timeout.ms": 90_000,
    "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "socket.connection.setup.timeout.ms": 5000,
}


class AckedProducer:
    def __init__(self, bootstrap: str, topic: str, **conf: object) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF, **conf})
        self.sent: list[tuple[str, str]] = []
        self.acked: list[str] = []
        self.failed: list[tuple[str, str]] = []

    def _report(self, err: object, msg: Message) -> None:
        value = msg.value().decode()
        if err is None:
            self.acked.append(value)
        else:
            self.failed.append((value, str(err)))

    def produce(self, count: int, *, pause: float = 0.001, between: Callable[[int], None] | None = None) -> None:
        """Produce `count` more messages, `pause` seconds apart; `between(i)` runs before the i-th."""
        for key, value in keyed_messages(count, tag="fault", start=len(self.sent)):
            if between is not None:
                between(len(self.sent))
            self.producer.produce(self.topic, key=key.encode(), value=value.encode(), on_delivery=self._report)
            self.sent.append((key, value))
            self.producer.poll(0)
            time.sleep(pause)

    @property
    def outstanding(self) -> int:
        """Messages produced and not yet acknowledged or failed."""
        return len(self.producer)

    def finish(self, timeout: float = 100.0) -> None:
        """Wait for every report, then let the producer go: its threads would otherwise keep
        reconnecting to a kqp the test has stopped until the garbage collector finds it."""
        left = self.producer.flush(timeout)
        assert left == 0, f"{left} messages neither acknowledged nor failed within {timeout}s"
        del self.producer


@dataclass(frozen=True, slots=True)
class Acked:
    key: str
    value: str
    partition: int
    offset: int


class BackgroundProducer:
    """Keyed, numbered messages every `every` seconds from a thread, until `stop()`; every
    acknowledgement kept with its partition and offset, every failure with its error."""

    def __init__(self, bootstrap: str, topic: str, *, tag: str = "bg", keys: int = 12, every: float = 0.01,
                 **conf: object) -> None:
        self.topic, self.tag, self.keys, self.every = topic, tag, keys, every
        self.producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF, "log_level": 3, **conf})
        self.acked: list[Acked] = []
        self.failed: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="background-producer", daemon=True)

    def _report(self, err: object, msg: Message) -> None:
        if err is None:
            self.acked.append(Acked(msg.key().decode(), msg.value().decode(), msg.partition(), msg.offset()))
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        while not self._stop.is_set():
            i = self.sent
            self.producer.produce(self.topic, key=f"key-{i % self.keys}".encode(), value=f"{self.tag}-{i:06d}".encode(),
                                  on_delivery=self._report)
            self.sent += 1
            self.producer.poll(self.every)

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def acked_to(self, partitions: set[int] | None = None) -> int:
        return sum(1 for a in list(self.acked) if partitions is None or a.partition in partitions)

    def wait_acked(self, more: int, partitions: set[int] | None = None, timeout: float = 30.0) -> None:
        """Until `more` messages beyond those acknowledged so far (to `partitions`) are acknowledged."""
        target = self.acked_to(partitions) + more
        deadline = time.monotonic() + timeout
        while self.acked_to(partitions) < target:
            assert not self.failed, f"deliveries failed: {self.failed[:3]}"
            assert self._thread.is_alive(), "the producer thread ended"
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.acked_to(partitions)} of {target} acknowledged within {timeout}s")
            time.sleep(0.05)

    def stop(self, timeout: float = 90.0) -> None:
        """Stop sending and wait for every report; the producer is let go (see `AckedProducer.finish`)."""
        self._stop.set()
        self._thread.join(10)
        left = self.producer.flush(timeout)
        assert left == 0, f"{left} messages neither acknowledged nor failed within {timeout}s"
        del self.producer
