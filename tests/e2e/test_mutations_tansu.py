"""KIP-599 end to end: real admin clients create and delete topics through kqp in front of Tansu,
faster than their controller_mutation_rate.

The two admin clients meet the two halves of KIP-599: kafka-python sends CreateTopics v7 and
DeleteTopics v6, which know THROTTLING_QUOTA_EXCEEDED, so kqp admits topics while the bucket has
tokens and answers the rest with error 89 (the client retries them); librdkafka (confluent-kafka)
sends CreateTopics v4 and DeleteTopics v4, which do not, so kqp admits every topic and throttles
the response and the connection instead. Either way every topic must exist exactly once at the
end, with the partitions asked for, and be gone after the deletes.

The quota: 10 partition mutations/s, 2 windows of 1 s: the bucket holds B = 20 tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from helpers.names import unique_topic
from helpers.topics import partition_count

pytestmark = pytest.mark.e2e

THROTTLING_QUOTA_EXCEEDED = 89
TOPIC_ALREADY_EXISTS = 36
RATE = 10
QUOTAS = {"window_size_seconds": 1, "window_count": 2,
          "entities": [{"client_id": "admin", "controller_mutation_rate": RATE}]}
PARTITIONS = 4


def retry_until_done(call: Callable[[list[str]], dict[str, int]], names: list[str],
                     timeout: float = 30.0) -> list[dict[str, int]]:
    """Call with the names still pending until none got error 89; every round's codes, in order."""
    from kafka.errors import NodeNotReadyError

    rounds: list[dict[str, int]] = []
    pending = list(names)
    deadline = time.monotonic() + timeout
    while pending:
        assert time.monotonic() < deadline, f"still throttled after {timeout}s: {pending}; rounds {rounds}"
        try:
            codes = call(pending)
        except NodeNotReadyError:            # kafka-python pausing itself for throttle_time_ms
            time.sleep(0.05)
            continue
        rounds.append(codes)
        pending = [n for n in pending if codes.get(n) == THROTTLING_QUOTA_EXCEEDED]
    return rounds


def first_success(rounds: list[dict[str, int]]) -> dict[str, int]:
    """How many rounds each topic needed, checking it succeeded exactly once and never clashed."""
    succeeded: dict[str, int] = {}
    for index, codes in enumerate(rounds):
        for name, code in codes.items():
            assert code in (0, THROTTLING_QUOTA_EXCEEDED), f"{name}: error {code} in round {index}: {rounds}"
            if code == 0:
                assert name not in succeeded, f"{name} succeeded twice"
                succeeded[name] = index
    return succeeded


def test_kafka_python_admin_gets_error_89_and_retries(tansu: str, kqp) -> None:
    from kafka.admin import KafkaAdminClient

    proxy = kqp(tansu, QUOTAS)
    names = [unique_topic(f"kp-mut{i}") for i in range(8)]
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="admin", request_timeout_ms=15_000)
    try:
        def create(pending: list[str]) -> dict[str, int]:
            result = admin.create_topics({n: {"num_partitions": PARTITIONS, "replication_factor": 1}
                                          for n in pending}, raise_errors=False)
            return {t["name"]: t["error_code"] for t in result["topics"]}

        def delete(pending: list[str]) -> dict[str, int]:
            result = admin.delete_topics(pending, raise_errors=False)
            return {t["name"]: t["error_code"] for t in result["topics"]}

        created = retry_until_done(create, names)
        # Tokens before each topic of the first request: 20, 16, 12, 8, 4, 0 -> six admitted,
        # the seventh meets K = -4 and it and the eighth get 89.
        assert [created[0][n] for n in names] == [0] * 6 + [THROTTLING_QUOTA_EXCEEDED] * 2
        assert set(first_success(created)) == set(names)
        for name in names:                  # exactly once, as asked, on the upstream itself
            assert partition_count(tansu, name) == PARTITIONS
        deleted = retry_until_done(delete, names)
        # 8 x 4 = 32 partitions to delete against at most B = 20 tokens: some must wait.
        assert THROTTLING_QUOTA_EXCEEDED in deleted[0].values()
        assert set(first_success(deleted)) == set(names)
    finally:
        admin.close()
    for name in names:
        assert partition_count(tansu, name) == 0


def test_confluent_admin_is_admitted_and_throttled(tansu: str, kqp) -> None:
    proxy = kqp(tansu, QUOTAS)
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, "client.id": "admin"})
    batches = [[unique_topic(f"ck-mut{b}-{i}") for i in range(4)] for b in range(3)]
    finished: list[float] = []
    for batch in batches:
        futures = admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in batch],
                                      operation_timeout=20, request_timeout=30)
        for future in futures.values():
            future.result(30)            # v4 knows no error 89: every topic is created
        finished.append(time.monotonic())
    # Batch 0: 16 mutations, K = 20 - 16 = 4, no throttle. Batch 1: K = -12, throttle 1.2 s.
    # Batch 2 is read only after that mute.
    assert finished[2] - finished[1] >= 1.0
    names = [n for batch in batches for n in batch]
    for name in names:
        assert partition_count(tansu, name) == PARTITIONS
    futures = admin.delete_topics(names, operation_timeout=20, request_timeout=30)
    for future in futures.values():
        future.result(30)
    for name in names:
        assert partition_count(tansu, name) == 0


def test_delete_charges_partitions_kqp_had_to_look_up(tansu: str, kqp) -> None:
    from kafka.admin import KafkaAdminClient

    # A 30-partition topic created behind kqp's back: kqp learns its size only by asking.
    big = unique_topic("big")
    direct = AdminClient({"bootstrap.servers": tansu})
    direct.create_topics([NewTopic(big, 30, 1)])[big].result(20)
    proxy = kqp(tansu, QUOTAS)
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="admin", request_timeout_ms=15_000)
    try:
        result = admin.delete_topics([big], raise_errors=False)
        assert [t["error_code"] for t in result["topics"]] == [0]     # admitted at K = 20: K = -10
        # The next mutation meets the debt: error 89, throttle -K/R = 10 / 10 = 1 s.
        probe = unique_topic("after-big")
        started = time.monotonic()
        result = admin.create_topics({probe: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False)
        assert [t["error_code"] for t in result["topics"]] == [THROTTLING_QUOTA_EXCEEDED]

        def create(pending: list[str]) -> dict[str, int]:
            answer = admin.create_topics({n: {"num_partitions": 1, "replication_factor": 1} for n in pending},
                                         raise_errors=False)
            return {t["name"]: t["error_code"] for t in answer["topics"]}

        retry_until_done(create, [probe])
        assert time.monotonic() - started >= 0.8
    finally:
        admin.close()
    assert partition_count(tansu, big) == 0
    assert partition_count(tansu, probe) == 1
    assert "topic metadata lookup" not in proxy.logs()      # the lookup worked: no failure logged
