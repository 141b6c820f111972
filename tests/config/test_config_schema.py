"""The schema machinery the sections are built from, used the way a new section would use it."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from kqp.config.errors import ConfigError
from kqp.config.schema import Field, did_you_mean, integer, optional, readable_file, section


@dataclass(frozen=True)
class TlsDemo:
    cert_file: str | None
    handshake_timeout_ms: int


TLS_DEMO = section(
    {"cert_file": Field(optional(readable_file), None), "handshake_timeout_ms": Field(integer(minimum=1), 10000)},
    TlsDemo,
)


def test_a_new_section_is_one_table(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    assert TLS_DEMO(None, "tls") == TlsDemo(None, 10000)
    assert TLS_DEMO({"cert_file": str(cert)}, "tls") == TlsDemo(str(cert), 10000)
    with pytest.raises(ConfigError) as info:
        TLS_DEMO({"handshake_timeout": 5}, "tls")
    assert str(info.value) == "config error: tls.handshake_timeout: unknown key; did you mean 'handshake_timeout_ms'?"


def test_unreadable_paths_are_refused(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigError) as info:
        TLS_DEMO({"cert_file": str(missing)}, "tls")
    assert str(info.value) == f"config error: tls.cert_file: cannot read {str(missing)!r}: No such file or directory"
    with pytest.raises(ConfigError) as info:
        TLS_DEMO({"cert_file": str(tmp_path)}, "tls")
    assert str(info.value) == f"config error: tls.cert_file: cannot read {str(tmp_path)!r}: Is a directory"


def test_defaults_go_through_the_check() -> None:
    broken = section({"n": Field(integer(minimum=1), 0)}, dict)
    with pytest.raises(ConfigError, match="n: must be an integer >= 1, got 0"):
        broken({}, "")


def test_did_you_mean() -> None:
    assert did_you_mean("lisen", ["listen", "metrics"]) == "did you mean 'listen'?"
    assert did_you_mean("zzz", ["listen", "metrics"]) == "expected one of listen, metrics"
    assert did_you_mean(3, ["listen"]) == "expected one of listen"
