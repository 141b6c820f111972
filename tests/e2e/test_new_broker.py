"""A broker kqp first hears of in a client's Metadata answer: listened for before the answer goes.

kqp binds one listener per upstream broker (`broker_port_base: 0` here: ephemeral ports, so the
port exists only once bound). Brokers it learns at start or from its periodic refresh are bound
then; one it first sees in a response a client is about to receive is the connection core's
`EnsureListeners`: the response waits, unrewritten, while the edge binds, then goes with kqp's new
port in it, and the client's connection to that port reaches the broker.

The upstream is librdkafka's two-broker mock cluster behind a wire tap (helpers.wire_tap) that hides
broker 2 from Metadata answers until the test says otherwise: kqp starts knowing broker 1 only, and
its refresh interval is long, so the client's first Metadata through kqp is where broker 2 appears.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from helpers.names import unique_topic
from helpers.quota_path import broker_addresses
from helpers.wire_tap import Pair, WireTap
from kafka.protocol.metadata import MetadataResponse
from upstreams import launch

from kqp.protocol.apis import ApiKey
from kqp.protocol.headers import response_body_offset, response_correlation_id

pytestmark = pytest.mark.e2e

HIDDEN = 2   # the mock's second broker


class HidingTap(WireTap):
    """A wire tap that drops broker 2 from every Metadata answer while `hiding` is set."""

    hiding = True

    def on_request(self, pair: Pair, frame: memoryview) -> memoryview:
        out = super().on_request(pair, frame)
        request = pair.pending.get(int.from_bytes(frame[8:12], "big"))
        if request is not None and request.api_key == ApiKey.Metadata:
            pair.metadata = getattr(pair, "metadata", {})   # type: ignore[attr-defined]
            pair.metadata[request.correlation_id] = request.api_version   # type: ignore[attr-defined]
        return out

    def on_response(self, pair: Pair, frame: memoryview) -> bytes | memoryview:
        version = getattr(pair, "metadata", {}).pop(response_correlation_id(frame), None)
        out = super().on_response(pair, frame)
        if version is None or not self.hiding:
            return out
        view = memoryview(bytes(out))
        offset = response_body_offset(ApiKey.Metadata, version, view)
        decoded = MetadataResponse.decode(bytes(view[offset:]), version=version)
        fields = {f.name: getattr(decoded, f.name) for f in MetadataResponse._struct.untagged_fields(version)}
        fields["brokers"] = [b for b in fields["brokers"] if b.node_id != HIDDEN]
        body = bytes(MetadataResponse(version=version, **fields).encode(version=version))
        return (len(body) + offset - 4).to_bytes(4, "big") + bytes(view[4:offset]) + body


def test_a_broker_first_named_to_a_client_gets_its_listener_before_the_answer_goes(kqp: Any,
                                                                                   tmp_path: Path) -> None:
    with launch.mock_cluster(tmp_path / "mock.log", brokers=2) as mock, HidingTap("upstream") as tap:
        hops = [tap.relay(address) for address in broker_addresses(mock)]
        proxy = kqp(",".join(hops), {}, upstream={"max_api_versions": launch.MOCK_MAX_API_VERSIONS,
                                                  "metadata_refresh_ms": 600_000})
        assert f"broker {HIDDEN} listener" not in proxy.logs(), "kqp must start knowing broker 1 only"
        tap.hiding = False
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "client.id": "new-broker",
                             "linger.ms": 5})
        topic = unique_topic("new-broker")
        metadata = producer.list_topics(topic, timeout=15)   # auto-creates it, 4 partitions over both brokers
        ours = {b.id: (b.host, b.port) for b in metadata.brokers.values()}
        assert set(ours) == {1, HIDDEN} and all(host == "127.0.0.1" for host, _ in ours.values())
        assert ours[HIDDEN][1] not in {int(hop.rsplit(":", 1)[1]) for hop in hops}, "kqp's own port, not the tap's"
        proxy.wait_for_log(f"broker {HIDDEN} listener on", timeout=5)
        led_by_hidden = {p.id for p in metadata.topics[topic].partitions.values() if p.leader == HIDDEN}
        for _ in range(10):   # the mock picks each leader at random: all 4 on broker 1 one time in 16
            if led_by_hidden:
                break
            topic = unique_topic("new-broker")
            metadata = producer.list_topics(topic, timeout=15)
            led_by_hidden = {p.id for p in metadata.topics[topic].partitions.values() if p.leader == HIDDEN}
        assert led_by_hidden, "the mock put no partition of 11 topics on broker 2"
        delivered: list[int] = []
        failed: list[str] = []
        for partition in sorted(metadata.topics[topic].partitions):
            producer.produce(topic, b"x" * 100, partition=partition,
                             on_delivery=lambda err, msg: failed.append(str(err)) if err else
                             delivered.append(msg.partition()))
        assert producer.flush(15) == 0 and not failed, failed
        assert led_by_hidden <= set(delivered), "what broker 2 leads was produced through kqp's new listener"
