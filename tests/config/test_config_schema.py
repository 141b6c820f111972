"""The schema machinery the sections are built from, used the way a new section would use it."""

from dataclasses import dataclass

import pytest

from kqp.config.errors import ConfigError
from kqp.config.schema import Field, did_you_mean, host, integer, optional, section


@dataclass(frozen=True)
class TlsDemo:
    server_name: str | None
    handshake_timeout_ms: int


TLS_DEMO = section(
    {"server_name": Field(optional(host), None), "handshake_timeout_ms": Field(integer(minimum=1), 10000)},
    TlsDemo,
)


def test_a_new_section_is_one_table() -> None:
    assert TLS_DEMO(None, "tls") == TlsDemo(None, 10000)
    assert TLS_DEMO({"server_name": "[::1]"}, "tls") == TlsDemo("::1", 10000)
    with pytest.raises(ConfigError) as info:
        TLS_DEMO({"handshake_timeout": 5}, "tls")
    assert str(info.value) == "config error: tls.handshake_timeout: unknown key; did you mean 'handshake_timeout_ms'?"


def test_a_field_check_names_its_path() -> None:
    with pytest.raises(ConfigError) as info:
        TLS_DEMO({"server_name": "kafka:9092"}, "tls")
    assert str(info.value) == "config error: tls.server_name: must be a host without a port, got 'kafka:9092'"


def test_defaults_go_through_the_check() -> None:
    broken = section({"n": Field(integer(minimum=1), 0)}, dict)
    with pytest.raises(ConfigError, match="n: must be an integer >= 1, got 0"):
        broken({}, "")


def test_did_you_mean() -> None:
    assert did_you_mean("lisen", ["listen", "metrics"]) == "did you mean 'listen'?"
    assert did_you_mean("zzz", ["listen", "metrics"]) == "expected one of listen, metrics"
    assert did_you_mean(3, ["listen"]) == "expected one of listen"
