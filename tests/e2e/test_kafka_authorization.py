"""Kafka's ACLs at kqp, in front of Apache Kafka 4.4 whose only principal for kqp may do everything.

kqp terminates SASL (its users alice, bob and root) and authorizes every request with its own ACLs:
alice may write topic A and read group GA, bob has no ACL, root is a super user. The referee is a
second Kafka node with StandardAuthorizer and the same users and ACLs, reached directly: librdkafka
(confluent-kafka), Kafka's Java client and kafka-python each write, read and list topics as each user
through kqp and on the referee, and must get the same answers, the broker's error codes
(TOPIC_AUTHORIZATION_FAILED 29, GROUP_AUTHORIZATION_FAILED 30), and the same topic listings. The
upstream itself has no authorizer: what alice is refused, kqp refused. Denials are counted per
user, operation and resource type, logged as Kafka's authorizer logs them, no password in the log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from helpers import acl_clients
from helpers.kqp_process import run_kqp_cli
from helpers.names import unique_group, unique_topic
from helpers.observability import sample, scrape, start_with_metrics
from upstreams.provisioned import kafka_or_skip

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("kafka-authorization")]

USERS = {"alice": "alice-secret", "bob": "bob-secret", "root": "root-secret"}
A, B = unique_topic("acl-a"), unique_topic("acl-b")
GA = unique_group("acl-ga")
ACLS = [
    {"principal": "User:alice", "operation": "Write", "resource_type": "Topic", "resource_name": A},
    {"principal": "User:alice", "operation": "Read", "resource_type": "Group", "resource_name": GA},
]
CASES = [   # (user, action, topic): what each user tries
    ("alice", "produce", A), ("alice", "produce", B), ("alice", "consume", B),
    ("bob", "produce", A), ("bob", "consume", A), ("root", "produce", B), ("root", "consume", B),
]


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in (A, B)])
    for future in futures.values():
        future.result(30)


@pytest.fixture(scope="module")
def referee(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka node authorizing with StandardAuthorizer and the same ACLs: its SASL_PLAINTEXT listener."""
    properties = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                  "super.users": "User:ANONYMOUS;User:root", "allow.everyone.if.no.acl.found": "false"}
    with kafka_or_skip(tmp_path_factory.mktemp("kafka-acls"), scram_users=USERS, properties=properties) as cluster:
        plaintext = cluster.listener("PLAINTEXT")   # ANONYMOUS there: a super user, as kqp's own user is
        create_topics(plaintext)
        kinds = {"Topic": ResourceType.TOPIC, "Group": ResourceType.GROUP}
        ops = {"Write": AclOperation.WRITE, "Read": AclOperation.READ}
        bindings = [AclBinding(kinds[a["resource_type"]], a["resource_name"], ResourcePatternType.LITERAL,
                               a["principal"], "*", ops[a["operation"]], AclPermissionType.ALLOW) for a in ACLS]
        admin = AdminClient({"bootstrap.servers": plaintext})   # kept: its futures die with it
        for future in admin.create_acls(bindings).values():
            future.result(30)
        yield cluster.listener("SASL_PLAINTEXT")


@pytest.fixture(scope="module")
def kafka_topics(kafka: str) -> str:
    create_topics(kafka)
    return kafka


def authorizing_kqp(kqp: Any, upstream: str, tmp_path: Path, **extra: Any) -> tuple[Any, str]:
    return start_with_metrics(kqp, upstream, quotas={}, sasl={"mode": "terminate", "users": USERS},
                              authorization={"super_users": ["User:root"], "acls": ACLS,
                                             **extra.pop("authorization", {})}, **extra)


def outcome(client: str, bootstrap: str, user: str, action: str, topic: str) -> str:
    if action == "produce":
        return acl_clients.produce(client, bootstrap, topic, user, USERS[user])
    return acl_clients.consume(client, bootstrap, topic, GA, user, USERS[user])


@pytest.mark.parametrize("client", acl_clients.CLIENTS)
def test_every_client_gets_the_brokers_answers_through_kqp(client: str, kqp: Any, kafka_topics: str, referee: str,
                                                            tmp_path: Path) -> None:
    proxy, metrics = authorizing_kqp(kqp, kafka_topics, tmp_path)
    through_kqp = {case: outcome(client, proxy.bootstrap, *case[:2], case[2]) for case in CASES}
    on_kafka = {case: outcome(client, referee, *case[:2], case[2]) for case in CASES}
    assert through_kqp == on_kafka
    # The issue's own words: alice writes A and is refused writing or reading B; bob everything; root nothing.
    assert through_kqp[("alice", "produce", A)] == "ok"
    assert through_kqp[("alice", "produce", B)] == "TOPIC_AUTHORIZATION_FAILED"
    assert through_kqp[("bob", "produce", A)] == "TOPIC_AUTHORIZATION_FAILED"
    assert through_kqp[("root", "consume", B)] == "ok"
    for user in USERS:   # Metadata shows each only what it may describe
        mine = acl_clients.topics(client, proxy.bootstrap, user, USERS[user]) & {A, B}
        assert mine == acl_clients.topics(client, referee, user, USERS[user]) & {A, B}, user
    assert acl_clients.topics(client, proxy.bootstrap, "alice", USERS["alice"]) & {A, B} == {A}
    samples = scrape(metrics)   # a client learns of a refused topic from Metadata first (DESCRIBE)
    for user in ("alice", "bob"):
        assert sum(v for (name, labels), v in samples.items() if name == "kqp_authorization_denials_total"
                   and ("user", user) in labels and ("resource_type", "TOPIC") in labels) > 0, user
    assert sample(samples, "kqp_authorization_denials_total", user="root", operation="DESCRIBE",
                  resource_type="TOPIC") is None
    logs = proxy.logs()
    assert f"Principal = User:alice is Denied operation = DESCRIBE from host = 127.0.0.1 on resource = " \
           f"Topic:LITERAL:{B} for request = Metadata" in logs
    assert not any(password in logs for password in USERS.values())
    explained = run_kqp_cli("explain", "--user", "alice", "--url", f"{metrics}/explain")
    assert explained.returncode == 0, explained.stderr
    assert f"Topic:LITERAL:{A} User:alice Allow Write from *" in explained.stdout
    assert f"DESCRIBE on TOPIC '{B}' from 127.0.0.1: no ACL names the resource, and " \
           "allow_everyone_if_no_acl_found is off" in explained.stdout
