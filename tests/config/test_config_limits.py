"""`limits:` and where the metrics endpoint binds: defaults, validation with one line naming the key."""

from __future__ import annotations

import pytest

from kqp.config.errors import ConfigError
from kqp.config.loader import parse_config
from kqp.config.model import HostPort, LimitsConfig


def test_limits_default_to_none_but_the_in_flight_cap() -> None:
    assert parse_config({}).limits == LimitsConfig(None, None, None, 1000)
    assert parse_config({"limits": None}).limits == parse_config({}).limits


def test_limits_are_read_as_given() -> None:
    limits = parse_config({"limits": {"max_connections": 10, "max_connections_per_ip": 2,
                                      "connection_creation_rate_per_ip": 0.5,
                                      "max_in_flight_per_connection": None}}).limits
    assert limits == LimitsConfig(10, 2, 0.5, None)


@pytest.mark.parametrize(("limits", "message"), [
    ({"max_connections": 0}, "limits.max_connections: must be an integer >= 1, got 0"),
    ({"max_connections_per_ip": 1.5}, "limits.max_connections_per_ip: must be an integer >= 1, got 1.5"),
    ({"connection_creation_rate_per_ip": 0},
     "limits.connection_creation_rate_per_ip: must be a positive number (connections per second), got 0"),
    ({"max_in_flight_per_connection": True}, "limits.max_in_flight_per_connection: must be an integer >= 1, got True"),
    ({"max_conections": 1}, "limits.max_conections: unknown key; did you mean 'max_connections'?"),
])
def test_a_wrong_limit_is_refused_naming_its_key(limits: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"limits": limits})
    assert str(refused.value) == f"config error: {message}"


@pytest.mark.parametrize("listen", [9404, "9404", ":9404"])
def test_a_metrics_port_alone_binds_loopback(listen: object) -> None:
    assert parse_config({"metrics": {"listen": listen}}).metrics.listen == HostPort("127.0.0.1", 9404)


def test_a_metrics_endpoint_on_every_interface_must_say_so() -> None:
    assert parse_config({"metrics": {"listen": "0.0.0.0:9404"}}).metrics.listen == HostPort("0.0.0.0", 9404)


@pytest.mark.parametrize(("listen", "fragment"), [(-1, "must be a host:port string"), ("94x4", "must be host:port"),
                                                   (True, "must be a host:port string")])
def test_a_wrong_metrics_listen_is_still_refused(listen: object, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_config({"metrics": {"listen": listen}})
