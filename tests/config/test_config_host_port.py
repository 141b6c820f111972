"""HostPort.parse: the one place host:port strings are read, for every address in the file."""

import pytest

from kqp.config.model import HostPort


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("127.0.0.1:9092", "127.0.0.1", 9092),
        ("kafka-0.kafka.svc:9092", "kafka-0.kafka.svc", 9092),
        ("  broker:1  ", "broker", 1),
        ("[::1]:9092", "::1", 9092),
        ("[fe80::1%eth0]:65535", "fe80::1%eth0", 65535),
    ],
)
def test_parse_accepts(text: str, host: str, port: int) -> None:
    assert HostPort.parse(text) == HostPort(host, port)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("broker", "must be host:port"),
        ("broker:", "port must be a number"),
        (":9092", "host must be non-empty"),
        ("broker:x1", "port must be a number"),
        ("broker:-1", "port must be a number"),
        ("broker:65536", "port must be in 1..65535"),
        ("broker:0", "port must be in 1..65535"),
        ("::1:9092", "an IPv6 host needs brackets"),
        ("[::1]9092", "must be [ipv6-host]:port"),
        ("[::1", "must be [ipv6-host]:port"),
        ("bro ker:1", "without spaces"),
        ("broker:٣", "port must be a number"),  # a non-ASCII digit
    ],
)
def test_parse_refuses(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        HostPort.parse(text)
    assert fragment in str(info.value)
    assert repr(text.strip()) in str(info.value)


def test_port_zero_only_when_allowed() -> None:
    assert HostPort.parse("0.0.0.0:0", allow_zero_port=True) == HostPort("0.0.0.0", 0)
    with pytest.raises(ValueError, match=r"in 1\.\.65535"):
        HostPort.parse("0.0.0.0:0")


@pytest.mark.parametrize("text", ["127.0.0.1:9092", "[::1]:9092", "broker.example:1"])
def test_str_round_trips(text: str) -> None:
    assert str(HostPort.parse(text)) == text
