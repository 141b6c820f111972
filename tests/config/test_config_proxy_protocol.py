"""`proxy_protocol:`: defaults, YAML's `off`, trusted networks, which listeners, one line per wrong input."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from kqp.config.errors import ConfigError
from kqp.config.loader import load_config, parse_config, read_yaml
from kqp.config.model import ProxyProtocolConfig

EXAMPLE_FILE = Path(__file__).resolve().parents[2] / "deploy" / "kqp.example.yaml"


def test_off_by_default_on_every_listener() -> None:
    config = parse_config({}).proxy_protocol
    assert config == ProxyProtocolConfig("off", (), ("bootstrap", "brokers"), 5000)
    assert not config.applies_to("bootstrap") and not config.applies_to("broker-1")


@pytest.mark.parametrize("text", ["proxy_protocol: {mode: off}", "proxy_protocol: {mode: 'off'}", "proxy_protocol:"])
def test_yamls_bare_off_is_off(text: str) -> None:
    # YAML 1.1 reads a bare `off` as the boolean false: it still means off, not an error.
    assert parse_config(read_yaml(text)).proxy_protocol.mode == "off"


def test_read_as_given() -> None:
    config = parse_config(read_yaml(
        "proxy_protocol: {mode: required, trusted: [10.0.0.0/8, 127.0.0.1, 'fd00::/8'], listeners: brokers,"
        " header_timeout_ms: 3000}")).proxy_protocol
    assert config.mode == "required" and config.header_timeout_ms == 3000
    assert config.trusted == (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("127.0.0.1/32"),
                              ipaddress.ip_network("fd00::/8"))
    assert (config.applies_to("bootstrap"), config.applies_to("broker-0"), config.applies_to("broker-17")) == (
        False, True, True)


@pytest.mark.parametrize(("ip", "trusted"), [
    ("10.200.3.4", True), ("11.0.0.1", False), ("127.0.0.1", True), ("127.0.0.2", False),
    ("fd00::1", True), ("fe80::1", False), ("not-an-ip", False),
    ("::ffff:10.1.2.3", True), ("::ffff:11.1.2.3", False),   # IPv4 peers of a dual-stack ([::]) listener
])
def test_trusted_networks(ip: str, trusted: bool) -> None:
    config = parse_config({"proxy_protocol": {"mode": "optional", "trusted": ["10.0.0.0/8", "127.0.0.1/32",
                                                                               "fd00::/8"]}}).proxy_protocol
    assert config.trusts(ip) is trusted


@pytest.mark.parametrize(("section", "message"), [
    ({"mode": "on"}, "proxy_protocol.mode: must be one of off, optional, required, got 'on'"),
    ({"mode": True}, "proxy_protocol.mode: must be one of off, optional, required, got True"),
    ({"mode": "required"}, "proxy_protocol.trusted: required with mode required: list the load balancers' "
                           "networks (a header from anywhere else is refused)"),
    ({"mode": "optional", "trusted": []}, "proxy_protocol.trusted: required with mode optional"),
    ({"trusted": ["10.0.0.1/8"]},
     "proxy_protocol.trusted[0]: '10.0.0.1/8' is not a network: has host bits set; did you mean 10.0.0.0/8?"),
    ({"trusted": ["10.0.0.0/8", "10.0.0.0/33"]}, "proxy_protocol.trusted[1]: '10.0.0.0/33' is not a network"),
    ({"trusted": ["balancer.local"]}, "proxy_protocol.trusted[0]: 'balancer.local' is not a network"),
    ({"trusted": [10]}, "proxy_protocol.trusted[0]: must be a network in CIDR form"),
    ({"trusted": {"a": 1}}, "proxy_protocol.trusted: must be a list of networks"),
    ({"listeners": []}, "proxy_protocol.listeners: must be a non-empty list of bootstrap and brokers"),
    ({"listeners": ["bootstrap", "broker-1"]},
     "proxy_protocol.listeners[1]: must be one of bootstrap, brokers, got 'broker-1'"),
    ({"header_timeout_ms": 0}, "proxy_protocol.header_timeout_ms: must be an integer >= 1, got 0"),
    ({"trusted_networks": []}, "proxy_protocol.trusted_networks: unknown key; did you mean 'trusted'?"),
])
def test_a_wrong_value_is_refused_naming_its_key(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"proxy_protocol": section})
    assert str(refused.value).startswith(f"config error: {message}")
    assert "\n" not in str(refused.value)


def test_optional_mode_needs_frames_that_cannot_look_like_a_header() -> None:
    # 0x0D000000 bytes and up: a frame's size prefix would start with b"\r", the v2 signature's first byte.
    section = {"mode": "optional", "trusted": ["10.0.0.0/8"]}
    below = parse_config({"max_frame_bytes": 0x0D000000 - 1, "proxy_protocol": section})
    assert below.proxy_protocol.mode == "optional"
    with pytest.raises(ConfigError, match=r"proxy_protocol\.mode: optional needs max_frame_bytes below 218103808"):
        parse_config({"max_frame_bytes": 0x0D000000, "proxy_protocol": section})
    assert parse_config({"max_frame_bytes": 0x0D000000, "proxy_protocol": {**section, "mode": "required"}})


def test_the_example_documents_every_key_and_runs_as_is() -> None:
    text = EXAMPLE_FILE.read_text()
    for key in ("mode", "trusted", "listeners", "header_timeout_ms"):
        assert f"  {key}:" in text, f"deploy/kqp.example.yaml does not document proxy_protocol.{key}"
    assert load_config(EXAMPLE_FILE).proxy_protocol.mode == "off"
