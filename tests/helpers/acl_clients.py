"""What a principal may do, as three real clients find out: librdkafka (confluent-kafka), Kafka's Java
client and kafka-python, logged in with SASL/PLAIN over SASL_PLAINTEXT.

Each call returns the outcome in Kafka's own error names ("ok", "TOPIC_AUTHORIZATION_FAILED",
"GROUP_AUTHORIZATION_FAILED", ...), whatever the client's dialect (librdkafka's error codes,
kafka-python's error classes, the Java client's exception classes), so one test can hold the three
to the same answers, and the same answers as a broker with StandardAuthorizer gives. Every call ends
at a deadline; a client that could not say is "timeout".
"""

from __future__ import annotations

import json
import logging
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from . import java_clients

CLIENTS = ("confluent-kafka", "java", "kafka-python")
JAVA_EXCEPTIONS = {"TopicAuthorizationException": "TOPIC_AUTHORIZATION_FAILED",
                   "GroupAuthorizationException": "GROUP_AUTHORIZATION_FAILED",
                   "ClusterAuthorizationException": "CLUSTER_AUTHORIZATION_FAILED",
                   "TransactionalIdAuthorizationException": "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                   "SaslAuthenticationException": "SASL_AUTHENTICATION_FAILED",
                   "TimeoutException": "timeout"}


def settings(client: str, user: str, password: str) -> dict[str, Any]:
    if client == "confluent-kafka":
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": user,
                "sasl.password": password}
    if client == "java":
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config":
                f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" '
                f'password="{password}";'}
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
            "sasl_plain_password": password}


def _java_outcome(errors: list[str]) -> str:
    if not errors:
        return "ok"
    for name, outcome in JAVA_EXCEPTIONS.items():
        if any(name in error.split(":", 1)[0] for error in errors):
            return outcome
    return f"java: {errors[0][:200]}"


def produce(client: str, bootstrap: str, topic: str, user: str, password: str, count: int = 3) -> str:
    """`count` records to `topic`: "ok" once all are acknowledged, else the error that stopped them."""
    if client == "confluent-kafka":
        failed: list[KafkaError] = []
        producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000, "linger.ms": 5,
                             **settings(client, user, password)})
        for i in range(count):
            producer.produce(topic, value=f"{user}-{i}".encode(), on_delivery=lambda e, _m: e and failed.append(e))
        left = producer.flush(25)
        return failed[0].name() if failed else "ok" if left == 0 else "timeout"
    if client == "java":
        run = java_clients.produce(bootstrap, topic, f"{user}-java", 30, max_records=count, record_bytes=10,
                                   conf={"max.block.ms": 15000, "delivery.timeout.ms": 20000,
                                         "request.timeout.ms": 10000, **settings(client, user, password)})
        return _java_outcome(run["errors"]) if run["acked"] < count or run["errors"] else "ok"
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PythonError
    from kafka.errors import KafkaTimeoutError
    try:
        py = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=15000, **settings(client, user, password))
        try:
            for future in [py.send(topic, f"{user}-{i}".encode()) for i in range(count)]:
                future.get(timeout=20)
        finally:
            py.close(timeout=5)
    except KafkaTimeoutError:
        return "timeout"
    except PythonError as exc:
        return str(getattr(exc, "message", type(exc).__name__))
    return "ok"


def consume(client: str, bootstrap: str, topic: str, group: str, user: str, password: str,
            timeout: float = 20.0) -> str:
    """Subscribe to `topic` in `group` and read one record: "ok", or the first error the client reports."""
    if client == "confluent-kafka":
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             **settings(client, user, password)})
        try:
            consumer.subscribe([topic])
            for _ in range(int(timeout * 2)):
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                return "ok" if error is None else error.name()
            return "timeout"
        finally:
            consumer.close()
    if client == "java":
        run = java_clients.consume(bootstrap, topic, f"{user}-java", group, 1, timeout,
                                   conf=settings(client, user, password))
        return _java_outcome(run["errors"]) if run["consumed"] < 1 or run["errors"] else "ok"
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError as PythonError
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             **settings(client, user, password))
    try:
        consumer.subscribe([topic])
        for _ in range(int(timeout * 2)):
            try:
                if consumer.poll(timeout_ms=500):
                    return "ok"
            except PythonError as exc:
                return str(getattr(exc, "message", type(exc).__name__))
        return "timeout"
    finally:
        log = logging.getLogger("kafka")
        level = log.level
        log.setLevel(logging.CRITICAL)   # its close on a refused group is noisy; later tests read its warnings
        try:
            consumer.close(autocommit=False)
        finally:
            log.setLevel(level)


def topics(client: str, bootstrap: str, user: str, password: str) -> set[str]:
    """The topics a listing (all-topics Metadata) shows the principal, internal ones left out."""
    if client == "confluent-kafka":
        admin = AdminClient({"bootstrap.servers": bootstrap, **settings(client, user, password)})
        listed = admin.list_topics(timeout=20)
        return {name for name in listed.topics if not name.startswith("__")}
    if client == "java":
        done = java_clients.run_tool("AclClient", "topics", bootstrap, "{}",
                                     *[arg for k, v in settings(client, user, password).items()
                                       for arg in ("--conf", f"{k}={v}")])
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert not out["errors"], out
        return {name for name in out["topics"] if not name.startswith("__")}
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **settings(client, user, password))
    try:
        return {name for name in admin.list_topics() if not name.startswith("__")}
    finally:
        admin.close()
