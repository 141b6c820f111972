"""Kafka's ACL admin API served by kqp: `kafka-acls` and the Java `Admin` manage kqp's ACLs.

In front of Apache Kafka 4.4 (no authorizer of its own), kqp terminates SASL and authorizes: the
config file gives alice her ACLs, `admin.principals` names ops. Kafka's own AclCommand
(`kafka-acls.sh`, from the Kafka 4.4 jars) adds, lists and removes through kqp, and the Java Admin
creates, describes and deletes; a change is in force for the next request, kept in
`authorization.state_file` across a restart, followed by a second kqp sharing that file (as a
fleet's instances share one volume), and audited: `kqp.audit` log lines with who, the
`<state_file>.history.jsonl` history, `kqp_acl_changes_total{source}`. alice, who may not alter
the cluster, is refused with CLUSTER_AUTHORIZATION_FAILED. A Java consumer whose READ is taken away
while it fetches on a fetch session (KIP-227) is refused on its next fetches, as by a broker.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import acl_clients, java_clients
from helpers.names import unique_group, unique_topic
from helpers.observability import sample, scrape, start_with_metrics

pytestmark = pytest.mark.e2e

USERS = {"alice": "alice-secret", "bob": "bob-secret", "ops": "ops-secret"}
A = unique_topic("acl-admin-a")
S = unique_topic("acl-admin-session")
ACLS = [{"principal": "User:alice", "operation": "Write", "resource_type": "Topic", "resource_name": A}]
FOLLOW_SECONDS = 5.0   # a second kqp follows the state file within a few polls


@pytest.fixture(scope="module")
def upstream(kafka: str) -> str:
    admin = AdminClient({"bootstrap.servers": kafka})
    for future in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1)
                                       for t in (A, S)]).values():
        future.result(30)
    return kafka


def config(tmp_path: Path) -> dict[str, Any]:
    return {"sasl": {"mode": "terminate", "users": USERS}, "admin": {"principals": ["User:ops"]},
            "authorization": {"acls": ACLS, "state_file": str(tmp_path / "acl-state.yaml")}}


def command_config(tmp_path: Path, user: str) -> str:
    path = tmp_path / f"{user}.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="{user}" password="{USERS[user]}";\n')
    return str(path)


def kafka_acls(bootstrap: str, tmp_path: Path, *args: str, user: str = "ops") -> str:
    """Kafka's AclCommand (`kafka-acls.sh`) against `bootstrap`, logged in as `user`: its stdout."""
    done = java_clients.run_tool("org.apache.kafka.tools.AclCommand", "--bootstrap-server", bootstrap,
                                 "--command-config", command_config(tmp_path, user), *args)
    assert done.returncode == 0, f"kafka-acls {args}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def java_admin(bootstrap: str, command: str, argument: object, user: str = "ops") -> dict[str, Any]:
    conf = acl_clients.settings("java", user, USERS[user])
    done = java_clients.run_tool("AclClient", command, bootstrap, json.dumps(argument),
                                 *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")])
    return json.loads(done.stdout.strip().splitlines()[-1])


def bob_writes(bootstrap: str) -> str:
    return acl_clients.produce("confluent-kafka", bootstrap, A, "bob", USERS["bob"], count=1)


def eventually(check: Any, seconds: float = FOLLOW_SECONDS) -> Any:
    deadline = time.monotonic() + seconds
    while not (result := check()) and time.monotonic() < deadline:
        time.sleep(0.25)
    return result


def test_kafka_acls_and_the_java_admin_manage_kqps_acls(kqp: Any, upstream: str, tmp_path: Path) -> None:
    proxy, metrics = start_with_metrics(kqp, upstream, quotas={}, **config(tmp_path))
    listed = kafka_acls(proxy.bootstrap, tmp_path, "--list")
    assert f"ResourcePattern(resourceType=TOPIC, name={A}, patternType=LITERAL)" in listed
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in listed
    assert bob_writes(proxy.bootstrap) == "TOPIC_AUTHORIZATION_FAILED"

    kafka_acls(proxy.bootstrap, tmp_path, "--add", "--allow-principal", "User:bob", "--operation", "Write",
               "--topic", A)
    assert bob_writes(proxy.bootstrap) == "ok"   # in force for the next request
    created = java_admin(proxy.bootstrap, "acls-create", [{"resource_type": "GROUP", "name": "gb",
                                                           "principal": "User:bob", "operation": "READ"}])
    assert created["errors"] == []
    described = java_admin(proxy.bootstrap, "acls-describe", {"principal": "User:bob"})["acls"]
    assert described == [
        "(pattern=ResourcePattern(resourceType=GROUP, name=gb, patternType=LITERAL), entry=(principal=User:bob, "
        "host=*, operation=READ, permissionType=ALLOW))",
        f"(pattern=ResourcePattern(resourceType=TOPIC, name={A}, patternType=LITERAL), entry=(principal=User:bob, "
        "host=*, operation=WRITE, permissionType=ALLOW))"]
    refused = java_admin(proxy.bootstrap, "acls-create", [{"name": "x", "principal": "User:alice",
                                                           "operation": "READ"}], user="alice")
    assert refused["errors"] and "ClusterAuthorizationException" in refused["errors"][0]
    samples = scrape(metrics)
    assert sample(samples, "kqp_acl_changes_total", source="admin_api") == 2

    # A restart keeps them; a second kqp on the same state file follows every change.
    assert proxy.stop() == 0
    again = kqp(upstream, {}, **config(tmp_path))
    other = kqp(upstream, {}, **config(tmp_path))
    assert bob_writes(again.bootstrap) == "ok"
    assert "User:bob" in kafka_acls(other.bootstrap, tmp_path, "--list", "--topic", A)
    removed = java_admin(again.bootstrap, "acls-delete", {"resource_type": "GROUP", "principal": "User:bob"})
    assert [acl.split(", entry")[0] for acl in removed["acls"]] == [
        "(pattern=ResourcePattern(resourceType=GROUP, name=gb, patternType=LITERAL)"]
    kafka_acls(other.bootstrap, tmp_path, "--remove", "--force", "--allow-principal", "User:bob", "--operation",
               "Write", "--topic", A)
    assert eventually(lambda: bob_writes(again.bootstrap) == "TOPIC_AUTHORIZATION_FAILED")
    # The config file's ACL removed through the API is hidden, not gone from the file.
    kafka_acls(again.bootstrap, tmp_path, "--remove", "--force", "--allow-principal", "User:alice",
               "--operation", "Write", "--topic", A)
    assert eventually(lambda: "User:alice" not in kafka_acls(other.bootstrap, tmp_path, "--list"))
    state = (tmp_path / "acl-state.yaml").read_text()
    assert "removed:" in state and "User:alice" in state

    # The audit trail: who changed what, in the log and the history beside the state file.
    assert "acl audit: admin_api by User:ops: Topic:LITERAL:" in again.logs()
    assert "acl audit: state_file by -:" in other.logs()
    history = [json.loads(line) for line in (tmp_path / "acl-state.yaml.history.jsonl").read_text().splitlines()]
    assert [(e["who"], e["source"], bool(e["after"])) for e in history] == [
        ("User:ops", "admin_api", True), ("User:ops", "admin_api", True), ("User:ops", "admin_api", False),
        ("User:ops", "admin_api", False), ("User:ops", "admin_api", False)]
    assert not any(password in again.logs() + other.logs() for password in USERS.values())


def write_upstream(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, f"r{i}".encode())
    assert producer.flush(30) == 0


def committed(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(S, 0)])
    [result] = admin.list_consumer_group_offsets([request]).values()
    return int(result.result(10).topic_partitions[0].offset)


def test_a_read_acl_taken_away_reaches_a_consumer_on_its_fetch_session(kqp: Any, upstream: str,
                                                                       tmp_path: Path) -> None:
    """The Java consumer fetches incrementally: once its session is open its requests name no topic, so
    kqp answers a session opened under ACLs since narrowed FETCH_SESSION_ID_NOT_FOUND, and the full
    fetch that follows is authorized whole: TOPIC_AUTHORIZATION_FAILED, nothing more is read."""
    group = unique_group("acl-session")
    bob = [{"principal": "User:bob", "operation": op, "resource_type": kind, "resource_name": name}
           for op, kind, name in (("Read", "Topic", S), ("Read", "Group", group))]
    cfg = config(tmp_path)
    cfg["authorization"]["acls"] = ACLS + bob
    proxy = kqp(upstream, {}, **cfg)
    write_upstream(upstream, S, 5)
    conf = acl_clients.settings("java", "bob", USERS["bob"]) | {"auto.commit.interval.ms": 200}
    consumer = subprocess.Popen(java_clients.java_command(
        java_clients.MAIN, "consume", proxy.bootstrap, S, "bob-java", group, "1000", "25",
        *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]), stdout=subprocess.PIPE, text=True)
    try:
        assert eventually(lambda: committed(upstream, group) == 5, seconds=60), "bob never read the first 5"
        time.sleep(1.0)   # incremental fetches on the open session meanwhile
        kafka_acls(proxy.bootstrap, tmp_path, "--remove", "--force", "--allow-principal", "User:bob",
                   "--operation", "Read", "--topic", S)
        time.sleep(2.0)   # past fetch.max.wait.ms: a fetch read before the change may answer with what comes next
        write_upstream(upstream, S, 5)
        out, _ = consumer.communicate(timeout=90)
    finally:
        consumer.kill()
    run = json.loads(out.strip().splitlines()[-1])
    assert run["consumed"] == 5, run
    assert any("TopicAuthorizationException" in error for error in run["errors"]), run
    assert "Principal = User:bob is Denied operation = READ from host = 127.0.0.1 on resource = Topic:LITERAL:" \
        f"{S}" in proxy.logs()
