"""A real client producing through kqp the whole time a test misbehaves next to it.

Limit and hostile-input tests must show that every other client keeps being served: a
confluent-kafka producer (librdkafka) in a thread of its own sends a small message every few
milliseconds and counts what was delivered and what failed. `progressed()` waits until more
messages have been delivered than at the moment it is asked, so a test proves service after the
misbehaviour, not just before it. Every wait is bounded and the thread stops on `stop()`.

With `rate`, it is a stream instead: records of `record_bytes` offered at `rate` bytes per second on
a steady clock (a late tick is not made up in a burst), each record's (offered at, delivery latency)
kept in `latencies` and its (offered at, bytes) in `offered`, for service-class and latency tests;
`sent_bytes` is what it handed the client between `started_at` and `stopped_at`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Producer

from .names import unique_topic
from .topics import ensure_topic


class SteadyProducer:
    def __init__(self, bootstrap: str, upstream_kind: str, client_id: str = "steady", *,
                 topic_via: str | None = None, topic: str | None = None, rate: float | None = None,
                 record_bytes: int = 1000, **conf: Any) -> None:
        """`conf` goes to the producer (TLS settings, say); the topic is made through kqp, or
        through `topic_via` (the upstream itself) when kqp's listener needs what `conf` has, unless
        `topic` names one that exists. `rate`: a stream of that many bytes per second."""
        self.topic = topic or unique_topic("steady")
        if topic is None:
            ensure_topic(topic_via or bootstrap, self.topic, 1, upstream_kind=upstream_kind)
        self._producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                                   "message.timeout.ms": 30000, **conf})
        self.rate, self.record_bytes = rate, record_bytes
        self.offered: list[tuple[float, int]] = []
        self.sent_bytes = 0
        self.started_at = self.stopped_at = 0.0   # when the thread began and stopped producing
        self.latencies: list[tuple[float, float]] = []
        self.delivered = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def start(self) -> SteadyProducer:
        """Start producing without waiting for a delivery (a stream measured from its first record)."""
        self._thread.start()
        return self

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        try:
            self.progressed()   # serving before the test starts misbehaving
        except BaseException:
            self._halt()        # __exit__ will not run: the thread must not outlive the test
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _delivered(self, err: Any, _msg: Any) -> None:
        with self._lock:
            if err is None:
                self.delivered += 1
            else:
                self.errors.append(str(err))

    def _run(self) -> None:
        self.started_at = time.monotonic()
        if self.rate is None:
            sequence = 0
            while not self._stop.is_set():
                self._producer.produce(self.topic, value=f"m{sequence}".encode(), on_delivery=self._delivered)
                sequence += 1
                self._producer.poll(0.01)
        else:
            self._stream(self.rate)
        self.stopped_at = time.monotonic()
        self._producer.flush(30)
        del self._producer   # librdkafka's threads and reconnects to a stopped kqp end with it

    def _stream(self, rate: float) -> None:
        interval = self.record_bytes / rate
        value = b"s" * self.record_bytes
        due = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= due:
                def delivered(err: Any, msg: Any, offered: float = now) -> None:
                    self._delivered(err, msg)
                    if err is None:
                        with self._lock:
                            self.latencies.append((offered, time.monotonic() - offered))

                self._producer.produce(self.topic, value=value, on_delivery=delivered)
                with self._lock:
                    self.offered.append((now, self.record_bytes))
                    self.sent_bytes += self.record_bytes
                due = max(due + interval, now - interval)   # behind by more than a record: skip, no burst
            self._producer.poll(max(0.0, min(0.002, due - time.monotonic())))

    def progressed(self, more: int = 20, timeout: float = 30.0) -> None:
        """Wait until `more` messages beyond those delivered so far are delivered, with no error."""
        with self._lock:
            target = self.delivered + more
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                assert not self.errors, f"the real client failed: {self.errors[:3]}"
                if self.delivered >= target:
                    return
            assert self._thread.is_alive(), "the producer thread ended"
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the real client delivered {self.delivered} of {target} within {timeout}s")
            time.sleep(0.02)

    def _halt(self) -> None:
        self._stop.set()
        self._thread.join(40)
        assert not self._thread.is_alive(), "the producer thread did not stop"

    def stop(self) -> None:
        self._halt()
        assert not self.errors, f"the real client failed: {self.errors[:3]}"
