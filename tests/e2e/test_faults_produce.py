"""Restarts and faults lose nothing: an idempotent acks=all producer through kqp while kqp is
SIGKILLed and restarted, while its upstream connections are cut mid-request, and while the upstream
refuses connections for a while.

kqp never answers a Produce itself: when an upstream connection dies with requests in flight, it
closes the client's connection (`upstream_closed`) and the client retries on a new one; librdkafka's
idempotence (producer id and sequence numbers, checked by the broker) turns every retry of a batch
the broker already wrote into a duplicate it drops. So, after each fault: every message is
acknowledged, and the upstream, read directly (not through kqp), holds each exactly once, in order
per partition.

The upstream is Tansu behind the fault tap (`helpers.fault_tap`), which every kqp upstream
connection passes (the tap rewrites the broker's address to its own hop). Not librdkafka's mock
cluster: with a Produce response cut after the mock broker wrote the batch, the same producer
talking to the mock *directly through the tap*, no kqp anywhere, finds the retried batch written
twice; Tansu drops the retry as a duplicate, as Kafka does.
"""

from __future__ import annotations

import signal
import time

import pytest
from helpers.acked_producer import AckedProducer
from helpers.checks import assert_exactly_once_in_order
from helpers.clients import confluent_consume
from helpers.fault_tap import FaultTap
from helpers.names import unique_group, unique_topic
from helpers.net import LOOPBACK, free_port
from helpers.topics import ensure_topic

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

PARTITIONS = 3
MESSAGES_PER_PHASE = 400


TANSU_NODE_ID = 111


def _upstream_of(tap: FaultTap) -> str:
    return ",".join(tap.hops.values())


def _check_upstream_holds_each_once(upstream: str, producer: AckedProducer) -> None:
    assert not producer.failed, f"messages failed: {producer.failed[:5]}"
    assert sorted(producer.acked) == sorted(v for _, v in producer.sent)
    consumed = confluent_consume(upstream, producer.topic, unique_group("faults"), len(producer.sent), 60)
    assert_exactly_once_in_order(producer.sent, consumed)


def _cut_produce_connections(tap: FaultTap) -> list[int]:
    """Numbers of the tap's connections that closed with a Produce unanswered."""
    return [c.number for c in tap.connections()
            if any(api_key == ApiKey.Produce for api_key, _ in c.unanswered_at_close)]


def test_kqp_sigkilled_and_restarted_on_the_same_ports_loses_nothing(tansu, fault_tap: FaultTap, kqp) -> None:
    # Fixed ports, as a sidecar's rolling update has them: clients keep the broker addresses they
    # learned, so the new process must serve the same listen port and broker ports (SO_REUSEADDR:
    # it binds at once, whatever the old sockets left in TIME_WAIT). Tansu's one broker is served on
    # base + its node id: a port that was free a moment ago.
    ports = {"listen": f"{LOOPBACK}:{free_port()}", "broker_port_base": free_port() - TANSU_NODE_ID}
    first = kqp(_upstream_of(fault_tap), **ports)
    topic = unique_topic("restart")
    ensure_topic(first.bootstrap, topic, PARTITIONS, upstream_kind="tansu")
    producer = AckedProducer(first.bootstrap, topic)

    producer.produce(MESSAGES_PER_PHASE)
    assert producer.outstanding > 0, "nothing in flight: the kill would not be mid-produce"
    first.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    producer.produce(MESSAGES_PER_PHASE)   # kqp is down: these queue in the client
    second = kqp(_upstream_of(fault_tap), **ports)   # the fixture stops it and checks it exits 0
    producer.produce(MESSAGES_PER_PHASE)
    producer.finish()
    assert second.bootstrap == first.bootstrap
    _check_upstream_holds_each_once(tansu, producer)


def test_upstream_connections_cut_mid_request_under_load_lose_nothing(tansu, fault_tap: FaultTap, kqp) -> None:
    proxy = kqp(_upstream_of(fault_tap))
    topic = unique_topic("cut")
    ensure_topic(proxy.bootstrap, topic, PARTITIONS, upstream_kind="tansu")
    producer = AckedProducer(proxy.bootstrap, topic)

    def faults(i: int) -> None:
        if i % 300 == 100:
            fault_tap.cut_mid_request(ApiKey.Produce, 2)    # half a Produce reaches the broker, then RST
        elif i % 300 == 200:
            fault_tap.cut_mid_response(ApiKey.Produce, 2)   # the broker wrote it; half its answer, then RST
        elif i % 300 == 0 and i:
            fault_tap.cut_all()                              # whatever is in flight either way

    producer.produce(3 * MESSAGES_PER_PHASE, between=faults)
    producer.finish()
    assert fault_tap.cut_count >= 8
    assert _cut_produce_connections(fault_tap), "no connection was cut with a Produce in flight"
    _check_upstream_holds_each_once(tansu, producer)
    assert "upstream connection closed" in proxy.logs()


def test_upstream_refusing_for_a_while_then_back_loses_nothing(tansu, fault_tap: FaultTap, kqp) -> None:
    proxy = kqp(_upstream_of(fault_tap))
    topic = unique_topic("down")
    ensure_topic(proxy.bootstrap, topic, PARTITIONS, upstream_kind="tansu")
    producer = AckedProducer(proxy.bootstrap, topic)

    producer.produce(MESSAGES_PER_PHASE)
    fault_tap.down()
    acked_when_down = len(producer.acked)
    producer.produce(MESSAGES_PER_PHASE)          # refused for the ~0.5 s this takes, and then some
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        producer.producer.poll(0.1)
    assert producer.outstanding > 0 and len(producer.acked) <= acked_when_down + MESSAGES_PER_PHASE
    fault_tap.up()
    producer.produce(MESSAGES_PER_PHASE)
    producer.finish()
    _check_upstream_holds_each_once(tansu, producer)
    assert "unreachable" in proxy.logs()

