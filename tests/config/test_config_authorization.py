"""The `authorization:` section, its ACL entries and state file, and `sasl.oauthbearer` / `max_reauth_ms`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.example_config import uncommented

from kqp.config import ConfigError, config_document, parse_config
from kqp.config.authorization_section import (
    AUTHORIZATION_FIELDS,
    acl_state_document,
    parse_acl_state,
)
from kqp.config.sasl_section import OAUTHBEARER_FIELDS
from kqp.quotas.acls.admin_layer import AclLayer
from kqp.quotas.acls.bindings import AclBinding, Operation, PatternType, Permission, ResourceType

UPSTREAM = {"upstream": {"bootstrap_servers": "a:1"}}
TERMINATE = {"mode": "terminate", "users": {"alice": "alice-secret"}}
EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "kqp.example.yaml"


def refusal(data: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config({**UPSTREAM, **data})
    return str(info.value)


def binding(op: Operation, kind: ResourceType, name: str, principal: str = "User:alice",
            pattern: PatternType = PatternType.LITERAL, permission: Permission = Permission.ALLOW,
            host: str = "*") -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, permission)


def test_authorization_is_on_exactly_where_kqp_alone_knows_the_user() -> None:
    assert parse_config(UPSTREAM).authorization.enabled is False
    assert parse_config({**UPSTREAM, "sasl": TERMINATE}).authorization.enabled is True
    assert parse_config({**UPSTREAM, "sasl": {"mode": "passthrough"}}).authorization.enabled is False
    off = parse_config({**UPSTREAM, "sasl": TERMINATE, "authorization": {"enabled": False}})
    assert off.authorization.enabled is False
    assert parse_config({**UPSTREAM, "authorization": {"enabled": True}}).authorization.enabled is True


def test_acl_entries_read_as_kafka_acls_writes_them() -> None:
    cfg = parse_config({**UPSTREAM, "authorization": {
        "super_users": ["User:admin"], "allow_everyone_if_no_acl_found": True,
        "acls": [{"principal": "User:alice", "operations": ["Write", "DESCRIBE"], "resource_type": "topic",
                  "resource_name": "a"},
                 {"principal": "User:alice", "operation": "Read", "resource_type": "Group", "resource_name": "ga",
                  "pattern_type": "prefixed", "permission": "Deny", "host": "10.0.0.1"},
                 {"principal": "User:*", "operation": "IdempotentWrite", "resource_type": "Cluster"}]}})
    auth = cfg.authorization
    assert (auth.super_users, auth.allow_everyone_if_no_acl_found) == (("User:admin",), True)
    assert auth.acls == {
        binding(Operation.WRITE, ResourceType.TOPIC, "a"), binding(Operation.DESCRIBE, ResourceType.TOPIC, "a"),
        binding(Operation.READ, ResourceType.GROUP, "ga", pattern=PatternType.PREFIXED, permission=Permission.DENY,
                host="10.0.0.1"),
        binding(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, "kafka-cluster", principal="User:*")}
    assert parse_config(yaml.safe_load(yaml.safe_dump(config_document(cfg)))) == cfg


@pytest.mark.parametrize(("section", "expected"), [
    ({"acls": [{"principal": "User:a", "operation": "Fly", "resource_type": "Topic", "resource_name": "t"}]},
     "authorization.acls[0].operation: must be one of All, Read, Write"),
    ({"acls": [{"principal": "alice", "operation": "Read", "resource_type": "Topic", "resource_name": "t"}]},
     "authorization.acls[0]: principal must be Kafka's form Type:Name"),
    ({"acls": [{"principal": "User:a", "operation": "Read", "resource_type": "Topic"}]},
     "authorization.acls[0].resource_name: required"),
    ({"acls": [{"principal": "User:a", "operation": "Read", "resource_type": "Cluster", "resource_name": "c"}]},
     "authorization.acls[0]: The only valid name for the CLUSTER resource is kafka-cluster"),
    ({"acls": [{"principal": "User:a", "resource_type": "Topic", "resource_name": "t"}]},
     "authorization.acls[0]: needs exactly one of operation and operations"),
    ({"acls": [{"principal": "User:a", "operation": "Read", "resource_type": "Topic", "resource_name": "t",
                "pattern": "Prefixed"}]}, "authorization.acls[0].pattern: unknown key; did you mean 'pattern_type'?"),
    ({"super_users": ["admin"]}, "authorization.super_users[0]: principal must be Kafka's form Type:Name"),
    ({"state_file": "/tmp/x.yaml", "enabled": False}, "authorization.state_file: only applies when authorization"),
])
def test_refusals_name_the_key(section: dict[str, object], expected: str) -> None:
    assert expected in refusal({"authorization": section})


def test_the_state_file_round_trips_and_names_a_bad_entry() -> None:
    layer = AclLayer(frozenset({binding(Operation.WRITE, ResourceType.TOPIC, "a")}),
                     frozenset({binding(Operation.READ, ResourceType.GROUP, "g", principal="User:bob")}))
    assert parse_acl_state(yaml.safe_load(yaml.safe_dump(acl_state_document(layer))), "s.yaml") == layer
    assert parse_acl_state(None, "s.yaml") == AclLayer()
    with pytest.raises(ConfigError, match=r"config error in s.yaml: acls\[0\].operation: ACL state file: must be"):
        parse_acl_state({"acls": [{"principal": "User:a", "operation": "x", "resource_type": "Topic",
                                   "resource_name": "t"}]}, "s.yaml")


def test_oauthbearer_terminates_without_users_and_needs_its_keys(tmp_path: Path) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text('{"keys": []}')
    cfg = parse_config({**UPSTREAM, "sasl": {"mode": "terminate", "max_reauth_ms": 60000, "oauthbearer": {
        "jwks_file": str(jwks), "issuer": "https://idp", "audience": "kafka"}}})
    oauth = cfg.sasl.oauthbearer
    assert cfg.sasl.mechanisms == ("OAUTHBEARER",) and cfg.sasl.max_reauth_ms == 60000
    assert oauth is not None
    assert (oauth.jwks_file, oauth.audience, oauth.clock_skew_seconds) == (str(jwks), ("kafka",), 30)
    assert parse_config(yaml.safe_load(yaml.safe_dump(config_document(cfg)))) == cfg
    both = parse_config({**UPSTREAM, "sasl": {**TERMINATE, "oauthbearer": {"jwks_url": "https://idp/jwks"}}})
    assert both.sasl.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@pytest.mark.parametrize(("sasl", "expected"), [
    ({"mode": "terminate", "mechanisms": ["OAUTHBEARER"]}, "sasl.oauthbearer: required with OAUTHBEARER"),
    ({**TERMINATE, "mechanisms": ["PLAIN"], "oauthbearer": {"jwks_url": "https://i/j"}},
     "sasl.mechanisms: must list OAUTHBEARER when sasl.oauthbearer is set"),
    ({"mode": "terminate", "oauthbearer": {}}, "sasl.oauthbearer: needs exactly one of jwks_url and jwks_file"),
    ({"mode": "terminate", "oauthbearer": {"jwks_url": "ftp://i/j"}}, "sasl.oauthbearer.jwks_url: must be an https://"),
    ({"mode": "passthrough", "oauthbearer": {"jwks_url": "https://i/j"}}, "sasl.oauthbearer: only applies to mode"),
    ({**TERMINATE, "max_reauth_ms": 0}, "sasl.max_reauth_ms: must be an integer >= 1"),
])
def test_oauthbearer_refusals_name_the_key(sasl: dict[str, object], expected: str) -> None:
    assert expected in refusal({"sasl": sasl})


def test_the_deploy_example_documents_every_key_and_its_blocks_load() -> None:
    text = EXAMPLE.read_text()
    for key in [*AUTHORIZATION_FIELDS, *OAUTHBEARER_FIELDS]:
        assert f"{key}:" in text, f"deploy/kqp.example.yaml does not document {key}"
    block = yaml.safe_load(uncommented("# authorization:"))["authorization"]
    cfg = parse_config({**UPSTREAM, "sasl": TERMINATE, "authorization": block})
    assert cfg.authorization.enabled and len(cfg.authorization.acls) == 2
    sasl = yaml.safe_load(uncommented("# sasl:"))["sasl"]
    sasl.pop("users_file")
    assert parse_config({**UPSTREAM, "sasl": sasl}).sasl.oauthbearer is not None
