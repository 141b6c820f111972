"""A Kafka Streams application through kqp, with the streams rebalance protocol (KIP-1071) and the classic one.

Kafka Streams 4.4 (tests/clients/java/StreamsClient.java) reads a topic, repartitions it by key
through an internal topic and writes each value upper-cased to an output topic, exactly once
(transactions: `exactly_once_v2`), through kqp in front of Apache Kafka. With
`group.protocol=streams` the group is a streams group: StreamsGroupHeartbeat, passed on its header
alone, and the broker creates the internal topic; with `classic` it is a consumer group and the
client creates it (CreateTopics, through kqp's mutation gate). Either way every input record reaches
the output exactly once, read back straight from Kafka with `isolation.level=read_committed`; the
application's `application.server` comes back as it was set (the streams group's `UserEndpoint` is
the application's, never a broker's, so kqp leaves it alone), and `kafka-streams-groups` describes
the group through kqp (StreamsGroupDescribe).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from helpers.java_clients import run_tool, streams_program
from helpers.names import unique_group, unique_topic
from helpers.share_groups import load
from helpers.topics import ensure_topic
from upstreams.launch import Upstream

pytestmark = pytest.mark.e2e

RECORDS = 2000
TIMEOUT = 120.0
ENDPOINT = "127.0.0.1:7777"   # never listened on: only announced to the group


def read_committed(bootstrap: str, topic: str, count: int, timeout: float) -> list[tuple[str, str]]:
    """(key, value) of `topic`'s committed records, straight from Kafka, until `count` or `timeout`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("streams-check"),
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "log_level": 3})
    consumer.subscribe([topic])
    out: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            out.append(((message.key() or b"").decode(), (message.value() or b"").decode()))
        time.sleep(1)   # anything beyond `count` (a duplicate) has a moment to show
        while (message := consumer.poll(0.5)) is not None:
            if not message.error():
                out.append(((message.key() or b"").decode(), (message.value() or b"").decode()))
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("protocol", ["streams", "classic"])
def test_a_streams_app_transforms_every_record_once_through_kqp(protocol: str, kqp: Any, kafka: Upstream,
                                                                 tmp_path: Path) -> None:
    proxy = kqp(kafka)
    source, sink = unique_topic(f"streams-in-{protocol}"), unique_topic(f"streams-out-{protocol}")
    for topic in (source, sink):
        ensure_topic(kafka, topic, 2, upstream_kind=kafka.kind)
    keys = load(kafka, source, RECORDS, value_bytes=100)
    application = unique_group(f"streams-{protocol}")
    stop = tmp_path / "stop"
    with streams_program().start("streams", proxy.bootstrap, source, sink, application, protocol, stop, TIMEOUT,
                                 state_dir=tmp_path / "state", conf={"application.server": ENDPOINT},
                                 timeout=TIMEOUT + 60) as app:
        output = read_committed(kafka, sink, RECORDS, TIMEOUT)
        described = None
        if protocol == "streams":
            described = run_tool("org.apache.kafka.tools.streams.StreamsGroupCommand", "--bootstrap-server",
                                 proxy.bootstrap, "--describe", "--group", application, "--members")
        stop.touch()
        told = app.result()

    assert not told["errors"] and "RUNNING" in told["states"], told
    seen = Counter(key for key, _ in output)
    assert not [k for k, n in seen.items() if n > 1], f"{protocol}: some records reached the output twice"
    assert set(seen) == set(keys), f"{protocol}: {len(set(keys) - set(seen))} of {RECORDS} never reached the output"
    assert {value for _, value in output} == {"X" * 100}, "every value upper-cased"
    assert told["endpoints"] == [ENDPOINT], f"the group told the application of {told['endpoints']}"
    if described is not None:
        assert described.returncode == 0, described.stderr[-2000:]
        assert application in described.stdout and "streams" in described.stdout, described.stdout
