"""The admin section and the admin state file: what they accept, and the one line naming what they refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kqp.config import ConfigError, parse_config
from kqp.config.admin_section import ADMIN_FIELDS, parse_state, state_document
from kqp.config.loader import load_config, read_yaml
from kqp.quotas.model import EntitySpec

UPSTREAM = {"upstream": {"bootstrap_servers": "a:1"}}
EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "kqp.example.yaml"


def refusal(admin: object) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config({**UPSTREAM, "admin": admin})
    return str(info.value)


def test_defaults_leave_the_api_to_the_upstream() -> None:
    admin = parse_config(UPSTREAM).admin
    assert (admin.manage_quotas, admin.principals, admin.state_file) == (False, (), None)


def test_a_full_section() -> None:
    admin = parse_config({**UPSTREAM, "admin": {"manage_quotas": True, "principals": ["User:ops", "User:ANONYMOUS"],
                                                "state_file": "/var/lib/kqp/q.yaml"}}).admin
    assert admin.principals == ("User:ops", "User:ANONYMOUS") and admin.state_file == "/var/lib/kqp/q.yaml"
    assert admin.describe_principals is None   # unset: everyone may describe, as before the key existed


@pytest.mark.parametrize(("value", "expected"), [([], ()), (["User:mon"], ("User:mon",)), (None, None)])
def test_describe_principals_unset_empty_or_listed(value: object, expected: object) -> None:
    admin = parse_config({**UPSTREAM, "admin": {"manage_quotas": True, "principals": ["User:ops"],
                                                "describe_principals": value, "state_file": "q.yaml"}}).admin
    assert admin.describe_principals == expected


@pytest.mark.parametrize(("admin", "message"), [
    ({"manage_quotas": True, "principals": ["User:ops"]},
     "admin.state_file: required with manage_quotas: true (where quota changes are kept across restarts)"),
    ({"manage_quotas": True, "state_file": "s.yaml"},
     "admin.principals: required with manage_quotas: true: who may alter quotas, e.g. [User:ops]"),
    ({"principals": ["ops"]}, "admin.principals[0]: must be Kafka's principal form User:NAME (User:ANONYMOUS for "
                              "unauthenticated clients), got 'ops'"),
    ({"principals": ["Group:x"]}, "admin.principals[0]: must be Kafka's principal form User:NAME (User:ANONYMOUS "
                                  "for unauthenticated clients), got 'Group:x'"),
    ({"principals": "User:ops"}, "admin.principals: must be a list of principals such as User:ops, got 'User:ops'"),
    ({"manage_quotas": "yes"}, "admin.manage_quotas: must be true or false, got 'yes'"),
    ({"manage_quota": True}, "admin.manage_quota: unknown key; did you mean 'manage_quotas'?"),
    ({"manage_quotas": True, "principals": ["User:ops"], "state_file": "s", "describe_principals": ["mon"]},
     "admin.describe_principals[0]: must be Kafka's principal form User:NAME (User:ANONYMOUS for unauthenticated "
     "clients), got 'mon'"),
])
def test_refused_with_one_line_naming_the_key(admin: object, message: str) -> None:
    assert refusal(admin) == f"config error: {message}"


def test_the_example_documents_every_admin_key_and_runs_as_is() -> None:
    text = EXAMPLE.read_text()
    for key in ADMIN_FIELDS:
        assert f"  {key}:" in text, f"deploy/kqp.example.yaml does not document admin.{key}"
    admin = load_config(EXAMPLE).admin
    assert admin.manage_quotas is False and admin.principals == ("User:ops",)
    assert admin.describe_principals == ("User:monitoring",)


# -- the state file ---------------------------------------------------------------------------------

def test_the_state_document_reads_back_as_the_layer() -> None:
    layer = {EntitySpec("alice", None): {"producer_byte_rate": 2048.0, "consumer_byte_rate": None},
             EntitySpec(None, "<default>"): {"request_rate": 5.0},
             EntitySpec("bob", None, client_id_prefix="spark-"): {"producer_byte_rate": 9.0}}
    text = yaml.safe_dump(state_document(layer))
    assert parse_state(read_yaml(text), "s.yaml") == layer
    assert parse_state(None, "s.yaml") == {}   # an empty file: an empty layer


@pytest.mark.parametrize(("text", "message"), [
    ("entities: 3", "entities: admin state file: must be a list of entity entries, got 3"),
    ("entities:\n- {user: a, producer_byte_rate: -1}",
     "entities[0].producer_byte_rate: admin state file: must be a number > 0, or null (removed), got -1"),
    ("entities:\n- {user: a, producer_byte_rate: fast}",
     "entities[0].producer_byte_rate: admin state file: must be a number > 0, or null (removed), got 'fast'"),
    ("entities:\n- {producer_byte_rate: 1}",
     "entities[0]: admin state file: a quota entity needs a user, a client id (or prefix) or both"),
    ("entities:\n- {client_id: a, client_id_prefix: b, request_rate: 1}",
     "entities[0]: admin state file: a quota entity has a client id or a client id prefix, not both"),
    ("entities:\n- {user: a, producr_byte_rate: 1}",
     "entities[0].producr_byte_rate: admin state file: unknown key; did you mean 'producer_byte_rate'?"),
    ("entities:\n- {user: a, request_rate: 1}\n- {user: a, request_rate: 2}",
     "entities[1]: admin state file: entity /users/a appears twice"),
    ("other: 1", "other: admin state file: unknown key; expected one of entities"),
])
def test_a_corrupt_state_file_is_refused_naming_the_file_and_the_entry(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_state(read_yaml(text), "/var/lib/kqp/q.yaml")
    assert str(info.value) == f"config error in /var/lib/kqp/q.yaml: {message}"
