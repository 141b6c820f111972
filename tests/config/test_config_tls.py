"""The tls: and upstream.tls: sections: defaults, cross-key checks, one-line errors, secrets kept secret."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.example_config import uncommented

from kqp.config import ConfigError, config_document, load_config, parse_config
from kqp.config.loader import TOP_FIELDS, UPSTREAM_FIELDS
from kqp.config.model import Secret
from kqp.config.tls_section import TLS_FIELDS, UPSTREAM_TLS_FIELDS
from kqp.quotas.principal_mapping import parse_rules

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "kqp.example.yaml"
PASSWORD = "hunter2-never-shown"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    paths = {}
    for name in ("cert", "key", "ca", "password"):
        path = tmp_path / f"{name}.pem"
        path.write_text("x")
        paths[name] = str(path)
    return paths


def parse(**sections: Any) -> Any:
    return parse_config({"upstream": {"bootstrap_servers": "k:9092"}, **sections}, "kqp.yaml")


def refusal(**sections: Any) -> str:
    with pytest.raises(ConfigError) as info:
        parse(**sections)
    return str(info.value).removeprefix("config error in kqp.yaml: ")


def test_absent_means_plaintext_on_both_sides() -> None:
    cfg = parse()
    assert cfg.tls is None
    assert cfg.upstream.tls is None
    assert parse(tls=None, upstream={"bootstrap_servers": "k:1", "tls": None}).tls is None


def test_listener_tls_with_its_defaults(files: dict[str, str]) -> None:
    tls = parse(tls={"cert": files["cert"], "key": files["key"]}).tls
    assert (tls.cert, tls.key, tls.client_ca, tls.client_auth) == (files["cert"], files["key"], None, "none")
    assert tls.principal_mapping_rules == parse_rules("DEFAULT")
    assert tls.handshake_timeout_ms == 10000
    assert tls.key_password is None


def test_a_client_ca_asks_for_client_certificates_unless_told_otherwise(files: dict[str, str]) -> None:
    base = {"cert": files["cert"], "key": files["key"], "client_ca": files["ca"]}
    assert parse(tls=base).tls.client_auth == "required"
    assert parse(tls={**base, "client_auth": "requested"}).tls.client_auth == "requested"
    assert parse(tls={**base, "client_auth": "none"}).tls.client_auth == "none"


def test_principal_mapping_rules_as_a_list_or_kafka_s_string(files: dict[str, str]) -> None:
    base = {"cert": files["cert"], "key": files["key"]}
    listed = parse(tls={**base, "principal_mapping_rules": ["RULE:^CN=(.*?),OU=eng.*$/$1/L", "DEFAULT"]})
    one_string = parse(tls={**base, "principal_mapping_rules": "RULE:^CN=(.*?),OU=eng.*$/$1/L, DEFAULT"})
    assert listed.tls.principal_mapping_rules == one_string.tls.principal_mapping_rules
    assert listed.tls.principal_mapping_rules.name("CN=Alice,OU=eng,O=Acme") == "alice"


def test_disabled_sections_are_off(files: dict[str, str]) -> None:
    cfg = parse(tls={"enabled": False, "cert": files["cert"], "key": files["key"]},
                upstream={"bootstrap_servers": "k:1", "tls": {"enabled": False}})
    assert (cfg.tls, cfg.upstream.tls) == (None, None)


def test_upstream_tls(files: dict[str, str]) -> None:
    tls = parse(upstream={"bootstrap_servers": "k:1", "tls": {}}).upstream.tls
    assert (tls.ca, tls.cert, tls.key, tls.server_hostname, tls.verify_hostname) == (None, None, None, None, True)
    tls = parse(upstream={"bootstrap_servers": "k:1", "tls": {
        "ca": files["ca"], "cert": files["cert"], "key": files["key"], "key_password_file": files["password"],
        "server_hostname": "kafka.internal", "verify_hostname": False}}).upstream.tls
    assert (tls.ca, tls.key_password_file, tls.server_hostname, tls.verify_hostname) == (
        files["ca"], files["password"], "kafka.internal", False)


@pytest.mark.parametrize(("section", "expected"), [
    ({}, "tls.cert: required: TLS listeners need a certificate and its key"),
    ({"cert": "{cert}"}, "tls.key: required: TLS listeners need a certificate and its key"),
    ({"cert": "{cert}", "key": "/nonexistent/key.pem"},
     "tls.key: cannot read '/nonexistent/key.pem': No such file or directory"),
    ({"cert": "{cert}", "key": "{key}", "client_auth": "required"},
     "tls.client_ca: required with client_auth: required (the CA that signs client certificates)"),
    ({"cert": "{cert}", "key": "{key}", "client_auth": "want"},
     "tls.client_auth: must be one of required, requested, none, got 'want'"),
    ({"cert": "{cert}", "key": "{key}", "key_password": "p", "key_password_file": "{password}"},
     "tls.key_password_file: set key_password or key_password_file, not both"),
    ({"cert": "{cert}", "key": "{key}", "principal_mapping_rules": ["DEFAULT", "RULE:^CN=(.*$/$1/"]},
     "tls.principal_mapping_rules[1]: RULE:^CN=(.*$/$1/: the pattern is not a regular expression: "
     "missing ), unterminated subpattern at position 4"),
    ({"cert": "{cert}", "key": "{key}", "principal_mapping_rules": "default"},
     "tls.principal_mapping_rules: invalid rule 'default': cannot read 'default' (a rule is DEFAULT or "
     "RULE:pattern/replacement/ with an optional L or U after it)"),
    ({"cert": "{cert}", "key": "{key}", "principal_mapping_rules": []},
     "tls.principal_mapping_rules: must be a list of rules (\"RULE:pattern/replacement/\", \"DEFAULT\"), "
     "got a list"),
    ({"cert": "{cert}", "key": "{key}", "handshake_timeout": 5},
     "tls.handshake_timeout: unknown key; did you mean 'handshake_timeout_ms'?"),
    ({"cert": "{cert}", "key": "{key}", "enabled": "yes"}, "tls.enabled: must be true or false, got 'yes'"),
])
def test_listener_tls_refusals(files: dict[str, str], section: dict[str, Any], expected: str) -> None:
    section = {k: v.format(**files) if isinstance(v, str) else v for k, v in section.items()}
    assert refusal(tls=section) == expected


@pytest.mark.parametrize(("section", "expected"), [
    ({"cert": "{cert}"}, "upstream.tls.key: cert and key go together (kqp's client certificate)"),
    ({"key": "{key}"}, "upstream.tls.cert: cert and key go together (kqp's client certificate)"),
    ({"key_password": "p"}, "upstream.tls.key_password: a key password needs a key"),
    ({"server_hostname": "a b"}, "upstream.tls.server_hostname: must be a host name or IP address, got 'a b'"),
    ({"verify_hostname": "no"}, "upstream.tls.verify_hostname: must be true or false, got 'no'"),
])
def test_upstream_tls_refusals(files: dict[str, str], section: dict[str, Any], expected: str) -> None:
    section = {k: v.format(**files) if isinstance(v, str) else v for k, v in section.items()}
    assert refusal(upstream={"bootstrap_servers": "k:1", "tls": section}) == expected


# -- the key password is never shown ------------------------------------------------------------

def test_a_password_that_is_not_a_string_is_refused_without_showing_it(files: dict[str, str]) -> None:
    line = refusal(tls={"cert": files["cert"], "key": files["key"], "key_password": 73519})
    assert line == "tls.key_password: must be a string (quote it in YAML), got a number (value not shown)"
    assert "73519" not in line


def test_the_password_is_in_no_repr_and_no_default_dump(files: dict[str, str]) -> None:
    cfg = parse(tls={"cert": files["cert"], "key": files["key"], "key_password": PASSWORD},
                upstream={"bootstrap_servers": "k:1", "tls": {"cert": files["cert"], "key": files["key"],
                                                              "key_password": PASSWORD}})
    assert cfg.tls.key_password == Secret(PASSWORD)
    assert cfg.tls.key_password.reveal() == PASSWORD
    for shown in (repr(cfg), str(cfg), repr(cfg.tls), str(cfg.tls.key_password), f"{cfg.upstream.tls}",
                  yaml.safe_dump(config_document(cfg))):
        assert PASSWORD not in shown
    assert config_document(cfg)["tls"]["key_password"] == "***"


def test_round_trip_with_secrets_revealed(tmp_path: Path, files: dict[str, str]) -> None:
    cfg = parse(tls={"cert": files["cert"], "key": files["key"], "key_password": PASSWORD,
                     "client_ca": files["ca"], "principal_mapping_rules": [r"RULE:^CN=([^,\/]*),.*$/$1/U", "DEFAULT"]},
                upstream={"bootstrap_servers": "k:1", "tls": {"ca": files["ca"], "server_hostname": "kafka"}})
    path = tmp_path / "dumped.yaml"
    path.write_text(yaml.safe_dump(config_document(cfg, reveal_secrets=True)))
    assert dataclasses.replace(load_config(path), source=cfg.source) == cfg


# -- the example documents every key --------------------------------------------------------------

@pytest.mark.parametrize(("table", "where"), [
    (TOP_FIELDS, ""), (UPSTREAM_FIELDS, "upstream"), (TLS_FIELDS, "tls"), (UPSTREAM_TLS_FIELDS, "upstream.tls"),
])
def test_the_example_names_every_key(table: dict[str, Any], where: str) -> None:
    # A key is documented when the example sets it or shows it commented out ("# key: value").
    text = EXAMPLE.read_text()
    missing = [key for key in table if not re.search(rf"^[\s#]*{key}:", text, re.MULTILINE)]
    assert missing == [], f"deploy/kqp.example.yaml does not document {where or 'top-level'} keys {missing}"


def test_the_commented_tls_examples_are_valid(tmp_path: Path, files: dict[str, str]) -> None:
    listener = yaml.safe_load(uncommented("# tls:"))["tls"]
    upstream = yaml.safe_load(uncommented("  # tls:").strip())["tls"]
    for section in (listener, upstream):
        for key in ("cert", "key", "client_ca", "ca"):
            if key in section:
                section[key] = files["cert"]
    cfg = parse(tls=listener, upstream={"bootstrap_servers": "k:1", "tls": upstream})
    assert cfg.tls.client_auth == "required"
    assert cfg.tls.principal_mapping_rules.name("CN=Alice,OU=eng,O=Acme,C=US") == "alice"
    assert cfg.upstream.tls.server_hostname == "kafka.internal"
