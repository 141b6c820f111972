"""Rolling a quota out: observed first, then enforced by a live reload, on the same connection.

A confluent-kafka producer (librdkafka) writes 1 kB records flat out to one partition through kqp,
its client id under a 100 kB/s producer_byte_rate in `mode: observe`. Observed, kqp measures and
charges it exactly as if enforced and counts what enforcing would cost (the seconds it would have
been muted, `kqp_observed_muted_seconds_total`), but the producer keeps at least 3 x the quota and is never
told a throttle (librdkafka's own statistics: its brokers' `throttle` window stays 0, and kqp's
`kqp_throttle_seconds_total` has no series for it). Then the file says `mode: enforce`: kqp keeps the
measurement, so the first request over quota pays back the last span's excess, (O / Q - 1) x W, and
from then on the producer is held to the quota: at most 1.15 x over the seconds after the switch, on
the connections it already had, and served again at the quota once the payback is over.

Flat out on loopback, librdkafka sends ~40 MB/s, 400 x the quota: its payback would be 400 spans
(minutes), which is Kafka's arithmetic but not this test's point. So the upstream is a broker
saturated at C = 500 kB/s (Tansu behind `helpers.saturated_upstream`), as a job's rate is bounded by
its cluster's: flat out is then 5 x the quota, and the payback (5 - 1) x 0.6 s at most.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from helpers.kqp_process import rewrite_config
from helpers.names import unique_topic
from helpers.net import kqp_ports, my_connections
from helpers.observability import metrics_url, sample, scrape
from helpers.saturated_upstream import saturated_tansu
from helpers.topics import create_topic

pytestmark = pytest.mark.e2e

CLIENT = "rolled-out"
QUOTA = 100_000                      # producer_byte_rate, bytes/s
CAPACITY = 500_000                   # what the saturated broker takes, bytes/s
VALUE = 1000
WINDOW, WINDOWS = 0.2, 3             # a 0.6 s quota span: throttles within a second of the first burst


def quotas(mode: str) -> dict[str, Any]:
    return {"window_size_seconds": WINDOW, "window_count": WINDOWS,
            "entities": [{"client_id": CLIENT, "producer_byte_rate": QUOTA, "mode": mode}]}


class Flat(threading.Thread):
    """Produces VALUE-byte records to partition 0 as fast as librdkafka takes them; keeps each
    delivery's time and the largest throttle librdkafka's statistics reported."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="flat-out", daemon=True)
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": CLIENT, "linger.ms": 5,
                                  "batch.size": 16384, "queue.buffering.max.kbytes": 64,
                                  "statistics.interval.ms": 250, "stats_cb": self._stats})
        self.delivered: list[float] = []
        self.errors: list[str] = []
        self.throttle_max_ms = 0
        self._halt = threading.Event()

    def _stats(self, text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            self.throttle_max_ms = max(self.throttle_max_ms, int(broker.get("throttle", {}).get("max", 0)))

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.delivered.append(time.monotonic())

    def run(self) -> None:
        value = os.urandom(VALUE // 2).hex().encode()
        while not self._halt.is_set():
            try:
                self.producer.produce(self.topic, partition=0, value=value, on_delivery=self._on_delivery)
            except BufferError:
                self.producer.poll(0.005)
            self.producer.poll(0)
        self.producer.flush(30)
        del self.producer   # librdkafka's threads, and its reconnects to a stopped kqp, end with it

    def rate(self, start: float, end: float) -> float:
        """Bytes per second delivered in [start, end) (record values: what the quota counts, near enough)."""
        return sum(1 for t in list(self.delivered) if start <= t < end) * VALUE / (end - start)

    def finish(self) -> None:
        """Stop; what is still queued (at most 64 kB: under a second at the quota) is flushed."""
        self._halt.set()
        self.join(60)
        assert not self.is_alive(), "the producer did not finish flushing"
        assert not self.errors, f"delivery errors: {self.errors[:5]}"


def observed_seconds(base: str) -> float:
    return sample(scrape(base), "kqp_observed_muted_seconds_total", quota="producer_byte_rate",
                  user="ANONYMOUS", client_id=CLIENT) or 0.0


def test_observed_then_enforced_by_a_reload_on_the_same_connection(kqp, tmp_path) -> None:
    with saturated_tansu(tmp_path / "tansu.log", CAPACITY) as broker:
        observe_then_enforce(kqp(broker.bootstrap, quotas("observe"), metrics={"listen": "127.0.0.1:0"}))


def observe_then_enforce(proxy: Any) -> None:
    base = metrics_url(proxy)
    topic = unique_topic("rollout")
    create_topic(proxy.bootstrap, topic, 1)
    producer = Flat(proxy.bootstrap, topic)
    producer.start()
    try:
        time.sleep(1.0)
        first = observed_seconds(base)
        time.sleep(2.0)
        now = time.monotonic()
        observed = producer.rate(now - 2.0, now)
        assert observed >= 3 * QUOTA, f"{observed:.0f} B/s observed: not kept flat out at >= 3 x {QUOTA}"
        assert observed_seconds(base) > first > 0, "the would-be-muted seconds do not grow"
        assert producer.throttle_max_ms == 0, f"an observed quota told a throttle of {producer.throttle_max_ms} ms"
        assert sample(scrape(base), "kqp_throttle_seconds_total", quota="producer_byte_rate", user="ANONYMOUS",
                      client_id=CLIENT) is None
        ports = kqp_ports(proxy)
        connections = my_connections(ports)
        assert connections, "the producer has no connection to kqp"

        mark = len(proxy.log_lines())
        rewrite_config(proxy.config_path, proxy.config, quotas=quotas("enforce"))
        proxy.wait_for_log(f"/clients/{CLIENT}: mode observe -> enforce", 3.0, after=mark)
        switched = time.monotonic()
        time.sleep(9.0)
        end = time.monotonic()
        # From a second after the switch (the log line comes once the quota is in force): the
        # payback of the observed excess, then the quota. Over 8 s the sampled rate's echo of
        # (3 - 1) windows (0.4 s x Q) and one 16 kB request (0.16 s x Q) allow at most 1.07 Q.
        enforced = producer.rate(switched + 1.0, end)
        assert enforced <= 1.15 * QUOTA, f"{enforced:.0f} B/s once enforced, quota {QUOTA}"
        again = producer.rate(switched + 5.0, end)
        assert again >= 0.5 * QUOTA, f"{again:.0f} B/s 5 s after the switch: the payback did not end"
        assert 0 < producer.throttle_max_ms <= 8000, f"told a throttle of {producer.throttle_max_ms} ms: not seconds"
        assert connections <= my_connections(ports), "a connection to kqp was dropped by the reload"
        print(f"observed {observed / QUOTA:.1f} x the quota; enforced {enforced / QUOTA:.2f} x, "
              f"{again / QUOTA:.2f} x from 5 s on; largest throttle {producer.throttle_max_ms} ms")
    finally:
        producer.finish()
