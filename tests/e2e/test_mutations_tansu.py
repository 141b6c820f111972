"""KIP-599 end to end: real admin clients create and delete topics through kqp in front of Tansu,
faster than their controller_mutation_rate.

The two admin clients meet the two halves of KIP-599: kafka-python sends CreateTopics v7 and
DeleteTopics v6, which know THROTTLING_QUOTA_EXCEEDED, so kqp admits topics while the bucket has
tokens and answers the rest with error 89 (the client retries them); librdkafka (confluent-kafka)
sends CreateTopics v4 and DeleteTopics v4, which do not, so kqp admits every topic and throttles
the response and the connection instead. Either way every topic must exist exactly once at the
end, with the partitions asked for, and be gone after the deletes.

Strict mode also puts the broker's own errors first: a topic that exists gets 36 and a missing
one 3, never 89, however negative the bucket. And a topic a Metadata request auto-creates is
charged to the requester.

The quota: 10 partition mutations/s, 2 windows of 1 s: the bucket holds B = 20 tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from helpers.names import unique_topic
from helpers.raw_client import RawConnection, Tally
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


UNKNOWN_TOPIC_OR_PARTITION = 3


def test_create_if_not_exists_never_sees_89_and_a_missing_delete_gets_3(tansu: str, kqp) -> None:
    """KIP-599 strict mode puts the broker's own errors first: the controller checks existence
    before it asks the quota, so an existing topic gets TOPIC_ALREADY_EXISTS (36) and a missing one
    UNKNOWN_TOPIC_OR_PARTITION (3) however negative the bucket, and spends nothing."""
    from kafka.admin import KafkaAdminClient

    # Topics that exist, one of them created behind kqp's back (kqp learns it only by asking).
    existing, behind = unique_topic("exists"), unique_topic("behind")
    direct = AdminClient({"bootstrap.servers": tansu})
    direct.create_topics([NewTopic(behind, 2, 1)])[behind].result(20)
    proxy = kqp(tansu, QUOTAS)
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="admin", request_timeout_ms=15_000)

    def create(names: list[str]) -> list[tuple[str, int]]:
        result = admin.create_topics({n: {"num_partitions": 1, "replication_factor": 1} for n in names},
                                     raise_errors=False)
        return [(t["name"], t["error_code"]) for t in result["topics"]]

    def delete(names: list[str]) -> list[tuple[str, int]]:
        result = admin.delete_topics(names, raise_errors=False)
        return sorted((t["name"], t["error_code"]) for t in result["topics"])

    try:
        assert create([existing]) == [(existing, 0)]                   # K = 20 - 1 = 19
        # A 100-partition topic is admitted at K = 19 and leaves K = -81: every new mutation gets
        # 89 for the next 8.1 s (R = 10/s).
        big = unique_topic("big")
        result = admin.create_topics({big: {"num_partitions": 100, "replication_factor": 1}}, raise_errors=False)
        assert [t["error_code"] for t in result["topics"]] == [0]
        started = time.monotonic()
        # "Create if not exists", ten times over, while the bucket is negative: never 89.
        for _ in range(10):
            assert create([existing, behind]) == [(existing, TOPIC_ALREADY_EXISTS), (behind, TOPIC_ALREADY_EXISTS)]
        # Deleting a topic that is not there: 3, not 89.
        ghost = unique_topic("ghost")
        for _ in range(3):
            assert delete([ghost]) == [(ghost, UNKNOWN_TOPIC_OR_PARTITION)]
        # Mixed with a topic that does need tokens, each gets its own answer, in the client's order.
        fresh = unique_topic("fresh")
        assert create([existing, fresh]) == [(existing, TOPIC_ALREADY_EXISTS), (fresh, THROTTLING_QUOTA_EXCEEDED)]
        # The same for DeleteTopics, from a second admin: kafka-python pauses the first one for
        # the throttle that came with the 89.
        other = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="admin", request_timeout_ms=15_000)
        try:
            result = other.delete_topics([ghost, behind], raise_errors=False)
            assert sorted((t["name"], t["error_code"]) for t in result["topics"]) == \
                sorted([(ghost, UNKNOWN_TOPIC_OR_PARTITION), (behind, THROTTLING_QUOTA_EXCEEDED)])
        finally:
            other.close()
        assert time.monotonic() - started < 8.0, "the bucket was negative throughout"
    finally:
        admin.close()
    # Nothing of the above reached the upstream as a mutation: the topics are as they were.
    assert partition_count(tansu, existing) == 1 and partition_count(tansu, behind) == 2
    assert partition_count(tansu, fresh) == 0


def test_topics_auto_created_through_metadata_are_charged_to_the_requester(tansu: str, kqp) -> None:
    """Tansu creates a topic a Metadata request names (allow_auto_topic_creation) at once, with 4
    partitions. kqp charges them to the requester, permissively, as Kafka's
    AutoTopicCreationManager does: with a burst of B = 1 x 2 x 1 = 2 tokens the requester's
    bucket ends at 2 - 4 = -2, and its next CreateTopics, within the 2 s the refill needs, gets 89."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.metadata import MetadataRequest

    if tansu.kind != "tansu":
        pytest.skip("needs an upstream that auto-creates a topic within the Metadata request itself (Tansu)")
    quotas = {"window_size_seconds": 1, "window_count": 2,
              "entities": [{"client_id": "auto", "controller_mutation_rate": 1}]}
    proxy = kqp(tansu, quotas)
    auto = unique_topic("auto")
    with RawConnection(proxy.bootstrap, "auto", Tally()) as raw:
        # The Metadata answer itself is not throttled: Kafka throttles it for request quotas only.
        _, answer = raw.call(3, 7, "Metadata", topics=[MetadataRequest.MetadataRequestTopic(name=auto)],
                             allow_auto_topic_creation=True)
        assert [(t.name, len(t.partitions)) for t in answer.topics] == [(auto, 4)]
        assert answer.throttle_time_ms == 0
        # Naming it again costs nothing more: it exists now.
        raw.call(3, 7, "Metadata", topics=[MetadataRequest.MetadataRequestTopic(name=auto)],
                 allow_auto_topic_creation=True)
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="auto", request_timeout_ms=15_000)
    try:
        probe = unique_topic("after-auto")
        result = admin.create_topics({probe: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False)
        assert [t["error_code"] for t in result["topics"]] == [THROTTLING_QUOTA_EXCEEDED]
    finally:
        admin.close()
    assert partition_count(tansu, probe) == 0
