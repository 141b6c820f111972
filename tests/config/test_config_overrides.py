"""CLI flags over the file, and over nothing at all (`kqp run --upstream X --listen Y`)."""

from pathlib import Path

import pytest

from kqp.config import ConfigError, HostPort, load_config, parse_config, with_overrides


def refusal(*args: object, **flags: str) -> str:
    with pytest.raises(ConfigError) as info:
        with_overrides(*args, **flags)  # type: ignore[arg-type]
    return str(info.value)


def test_flags_without_a_file() -> None:
    cfg = with_overrides(None, upstream="k1:9092,k2:9092", listen="127.0.0.1:29092")
    assert cfg.upstream.bootstrap_servers == (HostPort("k1", 9092), HostPort("k2", 9092))
    assert cfg.listen == HostPort("127.0.0.1", 29092)
    assert cfg.broker_port_base == 29093  # the default follows the flag
    assert cfg.source is None
    assert cfg.max_frame_bytes == 104857600


def test_no_upstream_anywhere_is_refused(tmp_path: Path) -> None:
    assert refusal(None) == (
        "config error: upstream.bootstrap_servers: required: set it in the config file or pass --upstream host:port"
    )
    path = tmp_path / "kqp.yaml"
    path.write_text("listen: 127.0.0.1:1\n")
    assert refusal(load_config(path), listen="127.0.0.1:2") == (
        f"config error in {path}: upstream.bootstrap_servers: required: set it in the config file "
        "or pass --upstream host:port"
    )


def test_file_upstream_is_enough() -> None:
    cfg = parse_config({"upstream": {"bootstrap_servers": ["f:1"]}})
    assert with_overrides(cfg) == cfg


def test_flags_win_over_the_file_and_keep_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "kqp.yaml"
    path.write_text(
        "listen: 127.0.0.1:19092\n"
        "upstream: {bootstrap_servers: [f:1], connect_timeout_ms: 5}\n"
        "quotas: {entities: [{user: a, request_rate: 3}]}\n"
    )
    file_cfg = load_config(path)
    cfg = with_overrides(file_cfg, upstream="cli:2", listen="10.0.0.1:9000", advertised_host="kqp.example")
    assert cfg.upstream.bootstrap_servers == (HostPort("cli", 2),)
    assert cfg.upstream.connect_timeout_ms == 5  # the rest of the section stays
    assert cfg.listen == HostPort("10.0.0.1", 9000)
    assert cfg.advertised_host == "kqp.example"
    assert cfg.broker_port_base == 9001
    assert cfg.quotas == file_cfg.quotas
    assert cfg.source == str(path)


def test_derived_defaults_follow_listen_but_explicit_values_stay() -> None:
    derived = parse_config({"upstream": {"bootstrap_servers": "f:1"}})
    moved = with_overrides(derived, listen="10.1.1.1:7000")
    assert (moved.advertised_host, moved.broker_port_base) == ("10.1.1.1", 7001)

    explicit = parse_config(
        {"upstream": {"bootstrap_servers": "f:1"}, "advertised_host": "kqp.svc", "broker_port_base": 30000}
    )
    moved = with_overrides(explicit, listen="10.1.1.1:7000")
    assert (moved.advertised_host, moved.broker_port_base) == ("kqp.svc", 30000)


def test_wildcard_listen_flag_needs_an_advertised_host() -> None:
    assert refusal(None, upstream="k:1", listen="0.0.0.0:9092") == (
        "config error: advertised_host: required when listen is a wildcard address (0.0.0.0): set the host "
        "clients connect to (or pass --advertised-host)"
    )
    cfg = with_overrides(None, upstream="k:1", listen="0.0.0.0:9092", advertised_host="10.0.0.5")
    assert cfg.advertised_host == "10.0.0.5"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"upstream": "k"}, "--upstream: must be host:port, e.g. 127.0.0.1:9092 or [::1]:9092, got 'k'"),
        ({"upstream": ""}, "--upstream: must name at least one broker as host:port"),
        ({"upstream": "k:1,k:0"}, "--upstream: port must be in 1..65535, got 'k:0'"),
        ({"upstream": "k:1", "listen": "h:99999"}, "--listen: port must be in 0..65535, got 'h:99999'"),
        ({"upstream": "k:1", "listen": "::1:5"}, "--listen: an IPv6 host needs brackets, e.g. [::1]:9092, got '::1:5'"),
        ({"upstream": "k:1", "advertised_host": "h:1"}, "--advertised-host: must be a host without a port, got 'h:1'"),
        ({"upstream": "k:1", "advertised_host": ""}, "--advertised-host: must not be empty"),
    ],
)
def test_bad_flags_are_named(flags: dict[str, str], expected: str) -> None:
    assert refusal(None, **flags) == f"config error: {expected}"


def test_bad_flag_over_a_file_names_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "kqp.yaml"
    path.write_text("upstream: {bootstrap_servers: 'f:1'}\n")
    assert refusal(load_config(path), upstream="x") == (
        "config error: --upstream: must be host:port, e.g. 127.0.0.1:9092 or [::1]:9092, got 'x'"
    )
