"""Loading whole files: defaults, the documented examples, round trips, derived values, file errors."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from kqp.config import ConfigError, HostPort, config_document, load_config, parse_config
from kqp.quotas.model import EntitySpec

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_FILE = REPO / "deploy" / "kqp.example.yaml"

# The example from the config brief, verbatim in substance.
BRIEF_EXAMPLE = """
listen: 127.0.0.1:19092
advertised_host: 127.0.0.1
broker_port_base: 19100
broker_ports: {}
upstream:
  bootstrap_servers: [127.0.0.1:9092]
  connect_timeout_ms: 10000
  metadata_refresh_ms: 30000
max_frame_bytes: 104857600
connections_max_idle_ms: 600000
shutdown_grace_ms: 10000
fetch_throttle: deliver
quotas:
  window_size_seconds: 1
  window_count: 11
  entities:
    - user: alice
      client_id: spark-writer
      producer_byte_rate: 1048576
    - client_id: <default>
      request_rate: 500
metrics:
  listen: 127.0.0.1:9404
  entity_expiry_seconds: 3600
  max_entities: 10000
"""


def write(tmp_path: Path, text: str, name: str = "kqp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_of_an_empty_file(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, ""))
    assert cfg.listen == HostPort("127.0.0.1", 19092)
    assert cfg.advertised_host == "127.0.0.1"
    assert cfg.broker_port_base == 19093  # listen port + 1
    assert dict(cfg.broker_ports) == {}
    assert cfg.upstream.bootstrap_servers == ()  # still to come from --upstream
    assert (cfg.upstream.connect_timeout_ms, cfg.upstream.metadata_refresh_ms) == (10000, 30000)
    assert cfg.max_frame_bytes == 104857600
    assert cfg.connections_max_idle_ms == 600000
    assert cfg.shutdown_grace_ms == 10000
    assert cfg.fetch_throttle == "deliver"
    assert (cfg.quotas.window_size_seconds, cfg.quotas.window_count) == (1.0, 11)
    assert dict(cfg.quotas.entities) == {}
    assert cfg.metrics.listen is None
    assert (cfg.metrics.entity_expiry_seconds, cfg.metrics.max_entities) == (3600.0, 10000)
    assert cfg.source == str(tmp_path / "kqp.yaml")


def test_empty_sections_read_as_defaults() -> None:
    assert parse_config({"upstream": None, "quotas": None, "metrics": None}) == parse_config({})


def test_the_brief_example_parses(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, BRIEF_EXAMPLE))
    assert cfg.broker_port_base == 19100
    assert cfg.upstream.bootstrap_servers == (HostPort("127.0.0.1", 9092),)
    assert cfg.metrics.listen == HostPort("127.0.0.1", 9404)
    assert dict(cfg.quotas.entities) == {
        EntitySpec(user="alice", client_id="spark-writer"): {"producer_byte_rate": 1048576.0},
        EntitySpec(user=None, client_id="<default>"): {"request_rate": 500.0},
    }


def test_the_deploy_example_parses_and_says_what_it_documents() -> None:
    cfg = load_config(EXAMPLE_FILE)
    assert cfg.listen == HostPort("127.0.0.1", 19092)
    assert cfg.broker_port(1001) == 19201  # the pin
    assert cfg.broker_port(2) == 19102
    assert cfg.metrics.listen == HostPort("127.0.0.1", 9404)
    anonymous = cfg.quotas.entities[EntitySpec(user="ANONYMOUS", client_id=None)]
    assert dict(anonymous) == {"request_percentage": 50.0, "controller_mutation_rate": 10.0}


@pytest.mark.parametrize("text", [BRIEF_EXAMPLE, EXAMPLE_FILE.read_text(), "upstream: {bootstrap_servers: 'a:1'}"])
def test_valid_files_round_trip(tmp_path: Path, text: str) -> None:
    cfg = parse_config(yaml.safe_load(text))
    dumped = yaml.safe_dump(config_document(cfg, reveal_secrets=True))
    again = load_config(write(tmp_path, dumped))
    assert dataclasses.replace(again, source=None) == cfg
    # and the dump is a fixed point
    assert config_document(again) == config_document(cfg)


def test_bootstrap_servers_as_one_string_or_a_list() -> None:
    as_string = parse_config({"upstream": {"bootstrap_servers": "a:1, [::1]:2,a:1,"}})
    as_list = parse_config({"upstream": {"bootstrap_servers": ["a:1", "[::1]:2"]}})
    expected = (HostPort("a", 1), HostPort("::1", 2))  # the repeated a:1 is dropped, order kept
    assert as_string.upstream.bootstrap_servers == as_list.upstream.bootstrap_servers == expected


def test_ipv6_listen_is_advertised_bare() -> None:
    cfg = parse_config({"listen": "[::1]:9092"})
    assert (cfg.listen, cfg.advertised_host, cfg.broker_port_base) == (HostPort("::1", 9092), "::1", 9093)
    assert parse_config({"advertised_host": "[fe80::2]"}).advertised_host == "fe80::2"


def test_wildcard_listen_with_an_advertised_host() -> None:
    cfg = parse_config({"listen": "0.0.0.0:9092", "advertised_host": "kqp.svc"})
    assert (cfg.listen.host, cfg.advertised_host) == ("0.0.0.0", "kqp.svc")


def test_listen_port_zero_makes_broker_ports_ephemeral() -> None:
    cfg = parse_config({"listen": "127.0.0.1:0", "broker_ports": {5: 20005}})
    assert cfg.broker_port_base == 0
    assert (cfg.broker_port(0), cfg.broker_port(7), cfg.broker_port(5)) == (0, 0, 20005)


def test_broker_port_base_and_pins() -> None:
    cfg = parse_config({"broker_port_base": 65000, "broker_ports": {100000: 19500, 3: 19503}})
    assert cfg.broker_port(0) == 65000
    assert cfg.broker_port(535) == 65535
    assert cfg.broker_port(3) == 19503  # a pin wins over base + 3
    assert cfg.broker_port(100000) == 19500
    with pytest.raises(ConfigError) as info:
        cfg.broker_port(536)
    assert str(info.value) == (
        "config error: broker_ports: broker node id 536: broker_port_base 65000 + 536 is above 65535; "
        "pin a port for it in broker_ports"
    )
    with pytest.raises(ValueError, match="non-negative"):
        cfg.broker_port(-1)


def test_explicit_base_zero_is_ephemeral() -> None:
    assert parse_config({"broker_port_base": 0}).broker_port(4) == 0


def test_metrics_on_an_ephemeral_port_may_share_port_zero() -> None:
    cfg = parse_config({"listen": "127.0.0.1:0", "metrics": {"listen": "127.0.0.1:0"}})
    assert cfg.metrics.listen == HostPort("127.0.0.1", 0)


def test_config_is_immutable() -> None:
    cfg = parse_config({"broker_ports": {1: 20001}, "quotas": {"entities": [{"user": "a", "request_rate": 1}]}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.listen = HostPort("x", 1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.broker_ports[2] = 20002  # type: ignore[index]
    with pytest.raises(TypeError):
        cfg.quotas.entities[EntitySpec(user="b", client_id=None)] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        cfg.document["listen"] = "x:1"  # type: ignore[index]


def test_the_caller_s_data_is_not_kept_by_reference() -> None:
    data = {"upstream": {"bootstrap_servers": ["a:1"]}}
    cfg = parse_config(data)
    data["upstream"]["bootstrap_servers"].append("b:2")
    assert cfg.document["upstream"]["bootstrap_servers"] == ("a:1",)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"config error in {path}: cannot read the file: No such file or directory"


def test_directory_instead_of_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert str(info.value) == f"config error in {tmp_path}: cannot read the file: Is a directory"


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "kqp.yaml"
    path.write_bytes(b"listen: \xff\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"config error in {path}: not UTF-8 text (byte 8)"


def test_yaml_errors_name_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: a:1\nlisten: a:2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"config error in {path}: invalid YAML at line 2, column 1: duplicate key 'listen'"


def test_python_only_yaml_tags_are_refused() -> None:
    from kqp.config.loader import read_yaml

    with pytest.raises(ConfigError, match="invalid YAML at line 1"):
        read_yaml("x: !!python/object/apply:os.system ['true']\n")


def test_max_api_versions_by_name_or_key_and_round_trip() -> None:
    from kqp.config.dump import config_document
    from kqp.config.loader import parse_config

    cfg = parse_config({"upstream": {"bootstrap_servers": "a:1", "max_api_versions": {"JoinGroup": 5, 1: 12}}})
    assert dict(cfg.upstream.max_api_versions) == {11: 5, 1: 12}
    assert parse_config(config_document(cfg)) == cfg


def test_max_api_versions_refuses_unknown_api_and_bad_version() -> None:
    import pytest

    from kqp.config.errors import ConfigError
    from kqp.config.loader import parse_config

    with pytest.raises(ConfigError, match=r"upstream.max_api_versions.JoinGrup: unknown API; did you mean 'JoinGroup'"):
        parse_config({"upstream": {"max_api_versions": {"JoinGrup": 5}}})
    with pytest.raises(ConfigError, match=r"upstream.max_api_versions.Fetch"):
        parse_config({"upstream": {"max_api_versions": {"Fetch": -1}}})
