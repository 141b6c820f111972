"""The sasl and upstream.sasl sections and the users file: what they accept, what they refuse, and
that no repr, dump of a refusal or error message ever shows a secret."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from helpers.example_config import uncommented

from kqp.config import ConfigError, config_document, parse_config
from kqp.config.model import ScramCredential, UserSecret

UPSTREAM = {"upstream": {"bootstrap_servers": "a:1"}}
SECRET = "hunter2-do-not-show"
SALT, STORED, SERVER = b"0123456789abcdef", b"S" * 32, b"V" * 32


def scram_entry(iterations: int = 4096) -> dict[str, object]:
    return {"salt": base64.b64encode(SALT).decode(), "iterations": iterations,
            "stored_key": base64.b64encode(STORED).decode(), "server_key": base64.b64encode(SERVER).decode()}


def refusal(data: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config({**UPSTREAM, **data})
    return str(info.value)


def test_sasl_defaults_to_none() -> None:
    cfg = parse_config(UPSTREAM)
    assert (cfg.sasl.mode, cfg.sasl.mechanisms, dict(cfg.sasl.credentials)) == (
        "none", ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), {})
    assert cfg.upstream.sasl is None


def test_terminate_with_inline_users_and_a_users_file(tmp_path: Path) -> None:
    users_file = tmp_path / "users.yaml"
    users_file.write_text(yaml.safe_dump({"bob": {"SCRAM-SHA-256": scram_entry()}}))
    cfg = parse_config({**UPSTREAM, "sasl": {"mode": "terminate", "mechanisms": ["SCRAM-SHA-256", "PLAIN"],
                                             "users": {"alice": SECRET}, "users_file": str(users_file)}})
    assert cfg.sasl.mechanisms == ("SCRAM-SHA-256", "PLAIN")
    assert cfg.sasl.credentials == {
        "alice": UserSecret(password=SECRET),
        "bob": UserSecret(scram={"SCRAM-SHA-256": ScramCredential(SALT, 4096, STORED, SERVER)})}


def test_round_trip_keeps_the_secrets_for_parsing_again() -> None:
    data = {**UPSTREAM, "sasl": {"mode": "terminate", "users": {
        "alice": SECRET, "bob": {"password": SECRET, "SCRAM-SHA-512": scram_entry()}}}}
    data["upstream"] = {**UPSTREAM["upstream"], "sasl": {"mechanism": "SCRAM-SHA-512", "username": "kqp",
                                                         "password": SECRET}}
    cfg = parse_config(data)
    assert parse_config(yaml.safe_load(yaml.safe_dump(config_document(cfg, reveal_secrets=True)))) == cfg
    assert SECRET not in yaml.safe_dump(config_document(cfg)), "secrets are masked unless asked for"


def test_no_repr_shows_a_secret(tmp_path: Path) -> None:
    users_file = tmp_path / "users.yaml"
    users_file.write_text(yaml.safe_dump({"bob": {"SCRAM-SHA-256": scram_entry()}}))
    cfg = parse_config({**UPSTREAM, "upstream": {"bootstrap_servers": "a:1", "sasl": {
        "mechanism": "PLAIN", "username": "kqp", "password": SECRET}},
        "sasl": {"mode": "terminate", "users": {"alice": SECRET}, "users_file": str(users_file)}})
    shown = repr(cfg) + repr(cfg.sasl.credentials) + str(cfg.upstream)
    for secret in (SECRET, base64.b64encode(STORED).decode(), repr(STORED), repr(SERVER)):
        assert secret not in shown
    assert "kqp" in repr(cfg.upstream.sasl)   # the user name is not a secret


@pytest.mark.parametrize(("data", "expected"), [
    ({"sasl": {"mode": "terminate"}}, "sasl: mode terminate needs users or users_file"),
    ({"sasl": {"mode": "kerberos"}}, "sasl.mode: must be one of none, terminate, passthrough"),
    ({"sasl": {"mode": "terminate", "users": {"a": "p"}, "mechanisms": ["GSSAPI"]}},
     "sasl.mechanisms[0]: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"sasl": {"mode": "passthrough", "users": {"a": "p"}}}, "sasl.users: only applies to mode terminate"),
    ({"sasl": {"mode": "terminate", "users": {"a": {"SCRAM-SHA-256": scram_entry(100)}}}},
     "sasl.users.a.SCRAM-SHA-256.iterations: must be an integer in 4096..10000000"),
    ({"sasl": {"mode": "terminate", "mechanisms": ["SCRAM-SHA-512"],
               "users": {"a": {"SCRAM-SHA-256": scram_entry()}}}},
     "sasl.users.a: has credentials for none of the enabled mechanisms (SCRAM-SHA-512)"),
    ({"sasl": {"mode": "terminate", "users": {"a": {"pasword": "x"}}}},
     "sasl.users.a.pasword: unknown key; did you mean 'password'?"),
    ({"upstream": {"bootstrap_servers": "a:1", "sasl": {"mechanism": "PLAIN", "username": "u"}}},
     "upstream.sasl: needs exactly one of password and password_file"),
    ({"upstream": {"bootstrap_servers": "a:1", "sasl": {"mechanism": "PLAIN", "password": "p"}}},
     "upstream.sasl.username: required when upstream.sasl is set"),
    ({"sasl": {"mode": "terminate", "users_file": "/nonexistent/users.yaml"}},
     "sasl.users_file: cannot read '/nonexistent/users.yaml'"),
])
def test_refusals_name_the_key(data: dict[str, object], expected: str) -> None:
    assert expected in refusal(data)


@pytest.mark.parametrize("bad", [12345678, ["a", "list"], {"nested": 1}])
def test_a_refused_secret_is_described_never_shown(bad: object) -> None:
    message = refusal({"sasl": {"mode": "terminate", "users": {"alice": {"password": bad}}}})
    assert "sasl.users.alice.password: must be a non-empty string" in message
    assert "12345678" not in message and "nested" not in message
    message = refusal({"upstream": {"bootstrap_servers": "a:1", "sasl": {
        "mechanism": "PLAIN", "username": "u", "password": bad}}})
    assert "upstream.sasl.password: must be a non-empty string" in message and "12345678" not in message


def test_a_users_file_error_names_the_file_and_the_key(tmp_path: Path) -> None:
    users_file = tmp_path / "users.yaml"
    users_file.write_text(yaml.safe_dump({"bob": {"SCRAM-SHA-256": {**scram_entry(), "salt": "not base64!"}}}))
    message = refusal({"sasl": {"mode": "terminate", "users_file": str(users_file)}})
    assert f"sasl.users_file: {users_file}: bob.SCRAM-SHA-256.salt: must be a base64 string" in message


def test_a_user_in_both_places_is_refused(tmp_path: Path) -> None:
    users_file = tmp_path / "users.yaml"
    users_file.write_text("alice: other\n")
    message = refusal({"sasl": {"mode": "terminate", "users": {"alice": "x"}, "users_file": str(users_file)}})
    assert "sasl.users.alice: also in users_file" in message


def test_the_upstream_password_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "upstream-password"
    secret.write_text(SECRET + "\n")
    data = {"upstream": {"bootstrap_servers": "a:1", "sasl": {"mechanism": "SCRAM-SHA-256", "username": "kqp",
                                                              "password_file": str(secret)}}}
    cfg = parse_config(data)
    assert cfg.upstream.sasl is not None and cfg.upstream.sasl.password == SECRET
    assert SECRET not in repr(cfg)
    dumped = config_document(cfg)
    assert SECRET not in yaml.safe_dump(dumped), "a password from a file stays in its file"
    assert parse_config(dumped) == cfg


def test_the_deploy_example_documents_every_sasl_key() -> None:
    from kqp.config.loader import load_config
    from kqp.config.sasl_section import SASL_FIELDS, UPSTREAM_SASL_FIELDS

    example = Path(__file__).resolve().parents[2] / "deploy" / "kqp.example.yaml"
    text = example.read_text()
    for key in [*SASL_FIELDS, *UPSTREAM_SASL_FIELDS]:
        assert f"{key}:" in text, f"deploy/kqp.example.yaml does not document {key}"
    assert load_config(example).sasl.mode == "none", "the example runs as is: SASL is commented out"
    # The commented-out blocks load as written (the users file is one the test provides).
    top = yaml.safe_load(uncommented("# sasl:"))["sasl"]
    top.pop("users_file")
    upstream = yaml.safe_load(uncommented("  # sasl:").strip())["sasl"]
    cfg = parse_config({"upstream": {"bootstrap_servers": "k:1", "sasl": upstream}, "sasl": top})
    assert cfg.sasl.mode == "terminate" and cfg.upstream.sasl is not None
