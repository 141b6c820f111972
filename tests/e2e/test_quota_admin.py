"""Kafka's quota admin API served by a running kqp (`admin.manage_quotas`), over real sockets.

Three clients speak it: raw frames (helpers.raw_client, built with kafka-python's message classes),
kafka-python's own connection manager (it negotiates the versions from kqp's ApiVersions; no Python
client has a public quota API: kafka-python 3.0's KafkaAdminClient, aiokafka's and
confluent-kafka 2.16's AdminClient have none), and `kqp quotas`, also over SASL. The upstream is
librdkafka's mock cluster, which knows neither API: kqp answers them itself. Covered: describe,
alter, validate_only, removal, an unauthorised principal refused (31) for alter and, with
`describe_principals`, for describe, a change enforced at once and kept across a restart.
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.kqp_process import run_kqp_cli
from helpers.names import unique_topic
from helpers.raw_client import RawConnection, Tally
from helpers.upstream_double import UpstreamDouble, read_frame
from kafka.protocol.admin import AlterClientQuotasRequest as Alter
from kafka.protocol.admin import DescribeClientQuotasRequest as Describe

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

BASE = {"entities": [{"user": "alice", "producer_byte_rate": 1000, "consumer_byte_rate": 5000}]}


def admin(tmp_path: Path, *principals: str) -> dict[str, Any]:
    return {"manage_quotas": True, "principals": list(principals), "state_file": str(tmp_path / "quota-state.yaml")}


def describe(conn: RawConnection, version: int = 1, **fields: Any) -> dict[str, dict[str, float]]:
    _, response = conn.call(ApiKey.DescribeClientQuotas, version, "DescribeClientQuotas",
                            components=fields.get("components", []), strict=fields.get("strict", False))
    assert response.error_code == 0, response
    return {" ".join(f"{e.entity_type}={e.entity_name}" for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def alter(conn: RawConnection, entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]],
          validate_only: bool = False, version: int = 1) -> tuple[int, str | None]:
    entry = Alter.EntryData(entity=[Alter.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                            ops=[Alter.EntryData.OpData(key=k, value=v, remove=r) for k, v, r in ops])
    _, response = conn.call(ApiKey.AlterClientQuotas, version, "AlterClientQuotas", entries=[entry],
                            validate_only=validate_only)
    (result,) = response.entries
    return result.error_code, result.error_message


def test_describe_alter_validate_remove_enforce_and_restart(kqp: Any, mock_cluster: str, tmp_path: Path) -> None:
    process = kqp(mock_cluster, BASE, admin=admin(tmp_path, "User:ANONYMOUS"))
    topic = unique_topic("admin")
    with RawConnection(process.bootstrap, "ops-cli", Tally()) as conn:
        assert describe(conn, version=0) == {"user=alice": {"producer_byte_rate": 1000.0, "consumer_byte_rate": 5000.0}}
        # validate_only: answered as the real thing, nothing changes.
        anonymous = [("user", "ANONYMOUS")]
        assert alter(conn, anonymous, [("producer_byte_rate", 1024, False)], validate_only=True) == (0, None)
        assert set(describe(conn)) == {"user=alice"}
        assert alter(conn, [("user", "alice")], [("producer_byte_rate", 1.5, False)]) == (
            42, "producer_byte_rate cannot be a fractional value.")
        # Before any quota on ANONYMOUS, a produce is not throttled...
        with RawConnection(conn.leader_address(topic), "writer", Tally()) as leader:
            leader.produce(topic, [b"x" * 1000] * 20)
            assert leader.tally.throttle_ms == [0]
        # ...set one (v0), and remove one of alice's config-file quotas (v1).
        assert alter(conn, [("user", "ANONYMOUS")], [("producer_byte_rate", 1024, False)], version=0) == (0, None)
        assert alter(conn, [("user", "alice")], [("consumer_byte_rate", 0, True)]) == (0, None)
        assert describe(conn) == {"user=ANONYMOUS": {"producer_byte_rate": 1024.0},
                                  "user=alice": {"producer_byte_rate": 1000.0}}
        assert describe(conn, components=[Describe.ComponentData(entity_type="user", match_type=0, match="alice")],
                        strict=True) == {"user=alice": {"producer_byte_rate": 1000.0}}
        # In force at once: 20 kB at once over 1 kB/s is throttled (KIP-219: the response carries it).
        with RawConnection(conn.leader_address(topic), "writer", Tally()) as leader:
            leader.produce(topic, [b"x" * 1000] * 20)
            assert leader.tally.throttle_ms[0] > 0
    process.wait_for_log("quota change by User:ANONYMOUS")
    assert process.stop() == 0
    # A restart: the same config, the state file read back.
    again = kqp(mock_cluster, BASE, admin=admin(tmp_path, "User:ANONYMOUS"))
    with RawConnection(again.bootstrap, "ops-cli", Tally()) as conn:
        assert describe(conn) == {"user=ANONYMOUS": {"producer_byte_rate": 1024.0},
                                  "user=alice": {"producer_byte_rate": 1000.0}}
    state = yaml.safe_load((tmp_path / "quota-state.yaml").read_text())
    assert state["entities"] == [{"user": "ANONYMOUS", "producer_byte_rate": 1024.0},
                                 {"user": "alice", "consumer_byte_rate": None}]


def test_kafka_python_negotiates_and_speaks_the_api(kqp: Any, mock_cluster: str, tmp_path: Path) -> None:
    from kafka import KafkaAdminClient

    process = kqp(mock_cluster, BASE, admin=admin(tmp_path, "User:ANONYMOUS"))
    client = KafkaAdminClient(bootstrap_servers=process.bootstrap, request_timeout_ms=10000)
    try:
        manager = client._manager   # kafka-python's connection manager picks the version from kqp's ApiVersions
        entry = Alter.EntryData(entity=[Alter.EntryData.EntityData(entity_type="client-id", entity_name=None)],
                                ops=[Alter.EntryData.OpData(key="request_percentage", value=25.0, remove=False)])
        altered = manager.run(manager.send, Alter(entries=[entry], validate_only=False))
        assert [(e.error_code, e.error_message) for e in altered.entries] == [(0, None)]
        described = manager.run(manager.send, Describe(components=[
            Describe.ComponentData(entity_type="client-id", match_type=1, match=None)], strict=True))
        assert described.version == 1 and described.error_code == 0
        assert [[(v.key, v.value) for v in e.values] for e in described.entries] == [[("request_percentage", 25.0)]]
    finally:
        client.close()


def test_kqp_quotas_over_sasl_and_an_unauthorised_user(kqp: Any, mock_cluster: str, tmp_path: Path) -> None:
    users = {"ops": "ops-secret", "mallory": "mallory-secret"}
    process = kqp(mock_cluster, BASE, admin=admin(tmp_path, "User:ops"),
                  sasl={"mode": "terminate", "users": users},
                  authorization={"allow_everyone_if_no_acl_found": True})
    props = tmp_path / "ops.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config="
                     'org.apache.kafka.common.security.scram.ScramLoginModule required username="ops" '
                     'password="ops-secret";\n')
    common = ("--bootstrap", process.bootstrap)
    done = run_kqp_cli("quotas", "alter", *common, "--command-config", str(props), "--user", "bob",
                       "--client-id", "<default>", "--add-config", "producer_byte_rate=2048,request_rate=5")
    assert done.returncode == 0, done.stderr
    # mallory logs in fine, but may not alter: CLUSTER_AUTHORIZATION_FAILED, nothing changed.
    refused = run_kqp_cli("quotas", "alter", *common, "--sasl-mechanism", "PLAIN", "--sasl-username", "mallory",
                          "--sasl-password-env", "MALLORY_PASSWORD", "--user", "bob", "--client-id", "<default>",
                          "--delete-config", "producer_byte_rate", env={"MALLORY_PASSWORD": "mallory-secret"})
    assert refused.returncode == 1
    assert "user=bob client-id=<default>: error 31: Cluster authorization failed." in refused.stderr
    grouped = run_kqp_cli("quotas", "alter", *common, "--command-config", str(props), "--client-id-prefix", "etl-",
                          "--add-config", "consumer_byte_rate=4096")
    assert grouped.returncode == 0, grouped.stderr
    shown = run_kqp_cli("quotas", "describe", *common, "--command-config", str(props), "--user", "bob", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == [
        {"entity": "user=bob client-id=<default>", "quota": "producer_byte_rate", "value": 2048.0},
        {"entity": "user=bob client-id=<default>", "quota": "request_rate", "value": 5.0}]
    # Offline, from the files: each value with its source.
    local = run_kqp_cli("quotas", "describe", "--config", str(process.config_path))
    assert local.returncode == 0, local.stderr
    rows = [line.split() for line in local.stdout.splitlines()]
    assert rows[0] == ["ENTITY", "QUOTA", "VALUE", "SOURCE"]
    assert ["/users/alice", "producer_byte_rate", "1000", "config", "file"] in rows
    assert ["/users/bob/clients/<default>", "request_rate", "5", "state", "file"] in rows
    assert ["/client-id-prefixes/etl-", "consumer_byte_rate", "4096", "state", "file"] in rows


def test_describe_principals_refuse_other_readers_over_sasl(kqp: Any, mock_cluster: str, tmp_path: Path) -> None:
    """`admin.describe_principals`: mon (listed) and ops (may alter) read; mallory, logged in, gets 31."""
    from helpers.sasl_clients import sasl_settings
    from kafka import KafkaAdminClient

    users = {"ops": "ops-secret", "mon": "mon-secret", "mallory": "mallory-secret"}
    process = kqp(mock_cluster, BASE, admin={**admin(tmp_path, "User:ops"), "describe_principals": ["User:mon"]},
                  sasl={"mode": "terminate", "users": users},
                  authorization={"allow_everyone_if_no_acl_found": True})

    def describe_as(user: str) -> tuple[int, str | None, list[str]]:
        client = KafkaAdminClient(bootstrap_servers=process.bootstrap, request_timeout_ms=10000,
                                  **sasl_settings("kafka-python", "SCRAM-SHA-256", user, users[user]))
        try:
            manager = client._manager   # kafka-python negotiates the version from kqp's ApiVersions
            answer = manager.run(manager.send, Describe(components=[], strict=False))
            entities = [" ".join(f"{e.entity_type}={e.entity_name}" for e in entry.entity)
                        for entry in answer.entries or []]
            return answer.error_code, answer.error_message, entities
        finally:
            client.close()

    assert describe_as("mon") == (0, None, ["user=alice"])
    assert describe_as("ops") == (0, None, ["user=alice"])
    assert describe_as("mallory") == (31, "Cluster authorization failed.", [])
    refused = run_kqp_cli("quotas", "describe", "--bootstrap", process.bootstrap, "--sasl-mechanism", "PLAIN",
                          "--sasl-username", "mallory", "--sasl-password-env", "PASSWORD",
                          env={"PASSWORD": "mallory-secret"})
    assert refused.returncode == 1 and "error 31: Cluster authorization failed." in refused.stderr, refused.stderr


def test_a_corrupt_state_file_stops_kqp_at_start_and_check_config_says_so(tmp_path: Path) -> None:
    state = tmp_path / "quota-state.yaml"
    state.write_text("entities:\n- {user: alice, producer_byte_rate: lots}\n")
    config = tmp_path / "kqp.yaml"
    config.write_text(yaml.safe_dump({"listen": "127.0.0.1:0", "upstream": {"bootstrap_servers": "127.0.0.1:9"},
                                      "admin": admin(tmp_path, "User:ops")}))
    line = (f"config error in {state}: entities[0].producer_byte_rate: admin state file: must be a number > 0, "
            f"or null (removed), got 'lots'")
    checked = run_kqp_cli("check-config", str(config))
    assert (checked.returncode, checked.stderr.strip()) == (2, line)
    ran = run_kqp_cli("run", "--config", str(config))
    assert (ran.returncode, ran.stderr.strip()) == (2, line)   # refused before it starts, as the check says
    assert state.read_text() == "entities:\n- {user: alice, producer_byte_rate: lots}\n"   # left as it was


@pytest.mark.parametrize(("args", "code", "message"), [
    (("alter", "--bootstrap", "127.0.0.1:9", "--add-config", "producer_byte_rate=1"), 2,
     "kqp quotas: name the entity: --user and/or --client-id (or --client-id-prefix)"),
    (("alter", "--bootstrap", "127.0.0.1:9", "--user", "a"), 2,
     "kqp quotas: nothing to alter: give --add-config and/or --delete-config"),
    (("alter", "--bootstrap", "127.0.0.1:9", "--user", "a", "--add-config", "producer_byte_rate"), 2,
     "kqp quotas: --add-config: 'producer_byte_rate' is not KEY=VALUE"),
    (("describe", "--bootstrap", "127.0.0.1:9", "--sasl-mechanism", "PLAIN"), 2,
     "kqp quotas: SASL needs a mechanism of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, a user and a password"),
    (("describe", "--bootstrap", "127.0.0.1:9"), 1, "kqp quotas: 127.0.0.1:9: "),
])
def test_kqp_quotas_refuses_wrong_input_with_one_line(args: tuple[str, ...], code: int, message: str) -> None:
    done = run_kqp_cli("quotas", *args)
    assert done.returncode == code and done.stderr.startswith(message), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


class _BrokenServer(UpstreamDouble):
    """Reads the first request, then closes (`answer` None) or sends `answer` and closes."""

    def __init__(self, answer: bytes | None) -> None:
        super().__init__()
        self.answer = answer

    def serve(self, sock: socket.socket, connection: int) -> None:
        if read_frame(sock) is not None and self.answer is not None:
            sock.sendall(self.answer)


@pytest.mark.parametrize(("answer", "message"), [
    (None, "0 bytes read on a total of 4 expected bytes"),
    (struct.pack(">ii", 4, 999_999), "answered correlation id 999999"),
], ids=["closes-after-reading", "wrong-correlation-id"])
def test_kqp_quotas_says_in_one_line_when_the_server_hangs_up_or_answers_garbage(
        answer: bytes | None, message: str) -> None:
    with _BrokenServer(answer) as server:
        done = run_kqp_cli("quotas", "describe", "--bootstrap", server.bootstrap)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"kqp quotas: {server.bootstrap}: ") and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
