"""kqp_muted_connections counts a throttled acks=1 producer while kqp holds its connection (issue 19).

A confluent-kafka producer (librdkafka) with acks=1 sends one Produce request through a real kqp in
front of Tansu, over its producer_byte_rate. The request's bytes are over quota when kqp reads it,
so kqp mutes the connection at once (a broker reads one request at a time), answers with the
throttle and keeps the mute for it. While the throttle holds, the metrics endpoint must count the
connection in `kqp_muted_connections` and, under its entity, in `kqp_entity_muted_connections`;
once the throttle has passed, both are back to 0 though the producer is still connected. (Before
issue 19, the first mute of an acks>=1 producer was never counted: it started without a cause.)

Quota arithmetic (Kafka's defaults, windows of 1 s x 11, producer_byte_rate 2000 B/s): a fresh
sensor measures over (11 - 1) x 1 s = 10 s, so one request of S bytes reads as S / 10 B/s and
throttles for X = (S / 10 - 2000) / 2000 x 10 = S / 2000 - 10 s: ~5 s for the ~30 KB request of
30 values of 1000 bytes here, long enough to scrape within it on a busy machine.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer
from helpers.names import unique_topic
from helpers.observability import sample, scrape, start_with_metrics
from helpers.topics import ensure_topic

pytestmark = pytest.mark.e2e

CLIENT = "muted-producer"
QUOTAS = {"entities": [{"client_id": CLIENT, "producer_byte_rate": 2000}]}
RECORDS, VALUE_BYTES = 30, 1000


def test_a_throttled_acks_1_producer_is_counted_as_muted_while_kqp_holds_it(tansu: Any, kqp: Any) -> None:
    proxy, url = start_with_metrics(kqp, tansu, quotas=QUOTAS)
    topic = unique_topic("muted")
    ensure_topic(proxy.bootstrap, topic, 1, upstream_kind=tansu.kind)
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "client.id": CLIENT, "acks": 1, "linger.ms": 200,
                         "request.timeout.ms": 20_000})
    errors: list[str] = []
    for i in range(RECORDS):   # one batch, one request: linger.ms holds them together
        producer.produce(topic, b"%04d" % i + b"v" * (VALUE_BYTES - 4), partition=0,
                         on_delivery=lambda err, _msg: errors.append(str(err)) if err is not None else None)
    assert producer.flush(15) == 0 and not errors, f"not delivered: {errors}"
    answered = time.monotonic()   # the response is back, throttle_time_ms filled; the mute holds ~5 s
    samples = scrape(url)
    assert time.monotonic() - answered < 4, "the scrape came too late to see the mute (machine too busy)"
    assert (sample(samples, "kqp_throttled_responses_total", user="ANONYMOUS", client_id=CLIENT,
                   quota="producer_byte_rate") or 0) >= 1, "the request was meant to be throttled"
    assert sample(samples, "kqp_muted_connections") == 1, "the throttled producer's connection is not counted"
    assert sample(samples, "kqp_entity_muted_connections", user="ANONYMOUS", client_id=CLIENT) == 1
    # The throttle passes (its timer ends the mute) while the producer stays connected.
    deadline = time.monotonic() + 20
    while (left := sample(scrape(url), "kqp_muted_connections") or 0) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == 0, "the mute never ended: a mute_started without its mute_ended"
    producer.flush(1)
