"""The ``proxy_protocol:`` section: whether kqp's listeners read a load balancer's PROXY header.

A balancer that speaks HAProxy's PROXY protocol writes the real client's address before the
client's own bytes. kqp reads it only where this section says so, and believes it only from the
balancers' networks (`trusted`, CIDRs): anyone else could claim any address. `mode` is `off`
(default; YAML's bare `off` reads as false, which is `off` too), `required` or `optional` (a
trusted network may send one; other sources are served as direct clients). `listeners` says which
of kqp's listeners read it (`bootstrap`, `brokers`, default both); a header not complete within
`header_timeout_ms` closes the connection (the specification asks for at least 3 s).

`optional` tells a header from a client's first byte, which the Kafka protocol makes safe: a frame's
size prefix starts with a zero byte below 16 MiB, a TLS record with 0x16, a header with `P` or CR;
so `max_frame_bytes` must stay below `OPTIONAL_MAX_FRAME_BYTES` (checked in the loader).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from kqp.config.errors import ConfigError, shown
from kqp.config.model import PROXY_PROTOCOL_LISTENERS, PROXY_PROTOCOL_MODES, ProxyProtocolConfig
from kqp.config.schema import Field, child, integer, read_section

# A frame this large would start with b"\r" (0x0D): optional mode could not tell it from a v2 header.
OPTIONAL_MAX_FRAME_BYTES = 0x0D000000


def _mode(value: object, path: str) -> str:
    if value is False:   # YAML 1.1: `mode: off` is the boolean false
        return "off"
    if not isinstance(value, str) or value not in PROXY_PROTOCOL_MODES:
        raise ConfigError(path, f"must be one of {', '.join(PROXY_PROTOCOL_MODES)}, got {shown(value)}")
    return value


def _network(value: object, path: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if not isinstance(value, str):
        raise ConfigError(path, f"must be a network in CIDR form (10.0.0.0/8, fd00::/8) or an address, "
                                f"got {shown(value)}")
    try:
        return ipaddress.ip_network(value.strip())
    except ValueError as exc:
        hint = ""
        try:
            hint = f"; did you mean {ipaddress.ip_network(value.strip(), strict=False)}?"
        except ValueError:
            pass
        reason = "has host bits set" if hint else str(exc)
        raise ConfigError(path, f"{value!r} is not a network: {reason}{hint}") from None


def _networks(value: object, path: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise ConfigError(path, f"must be a list of networks, e.g. [10.0.0.0/8, 127.0.0.1/32], got {shown(value)}")
    return tuple(dict.fromkeys(_network(item, f"{path}[{index}]") for index, item in enumerate(value)))


def _listeners(value: object, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(path, f"must be a non-empty list of {' and '.join(PROXY_PROTOCOL_LISTENERS)}, "
                                f"got {shown(value)}")
    for index, item in enumerate(value):
        if item not in PROXY_PROTOCOL_LISTENERS:
            raise ConfigError(f"{path}[{index}]", f"must be one of {', '.join(PROXY_PROTOCOL_LISTENERS)}, "
                                                  f"got {shown(item)}")
    return tuple(dict.fromkeys(value))


PROXY_PROTOCOL_FIELDS = {
    "mode": Field(_mode, "off"),
    "trusted": Field(_networks, []),
    "listeners": Field(_listeners, list(PROXY_PROTOCOL_LISTENERS)),
    "header_timeout_ms": Field(integer(minimum=1), 5000),
}


def proxy_protocol_section(value: object, path: str) -> ProxyProtocolConfig:
    values: dict[str, Any] = read_section(value, path, PROXY_PROTOCOL_FIELDS)
    if values["mode"] != "off" and not values["trusted"]:
        raise ConfigError(child(path, "trusted"), f"required with mode {values['mode']}: list the load balancers' "
                                                  "networks (a header from anywhere else is refused)")
    return ProxyProtocolConfig(**values)


def proxy_protocol_document(config: ProxyProtocolConfig) -> dict[str, object]:
    return {"mode": config.mode, "trusted": [str(network) for network in config.trusted],
            "listeners": list(config.listeners), "header_timeout_ms": config.header_timeout_ms}
