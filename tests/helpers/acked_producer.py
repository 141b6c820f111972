"""An idempotent acks=all producer that writes down what was acknowledged, for fault tests.

"Nothing acknowledged is lost or doubled" is checked against what the client was told: every
delivery report is kept, and a test compares the acknowledged values with what the upstream holds.
Values carry a sequence number (`clients.keyed_messages`), so duplicates and gaps name messages.
"""

from __future__ import annotations

import time
from collections.abc import Callable

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
