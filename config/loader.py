"""Reading kqp.yaml into a ProxyConfig, and applying the CLI's overrides.

The file goes through three steps, each refusing bad input with one line naming the key:
YAML text -> plain data (:func:`read_yaml`: syntax errors with line and column, duplicate keys
refused instead of silently keeping the last) -> checked values (the schema tables below) ->
derived values that depend on several keys (the advertised host and broker ports follow
``listen`` unless set). CLI flags do not patch a finished config: they are checked under their
flag names, merged into the file's data, and the whole is parsed again, so a default derived from
``listen`` follows ``--listen`` exactly as it would follow the file.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from kqp.config.admin_section import admin_config
from kqp.config.authorization_section import authorization_config
from kqp.config.errors import ConfigError, shown
from kqp.config.model import (
    FETCH_THROTTLE_MODES,
    MAX_PORT,
    AuthorizationConfig,
    LimitsConfig,
    MetricsConfig,
    ProxyConfig,
    UpstreamConfig,
)
from kqp.config.proxy_protocol_section import OPTIONAL_MAX_FRAME_BYTES, proxy_protocol_section
from kqp.config.quota_section import quota_section
from kqp.config.sasl_section import sasl_config, upstream_sasl
from kqp.config.schema import (
    Field,
    api_version_caps,
    boolean,
    choice,
    host,
    host_port,
    host_port_list,
    integer,
    number,
    optional,
    port_pins,
    read_section,
    section,
)
from kqp.config.tls_section import tls_section, upstream_tls_section

UPSTREAM_FIELDS = {
    "bootstrap_servers": Field(host_port_list, None),
    "connect_timeout_ms": Field(integer(minimum=1), 10000),
    "metadata_refresh_ms": Field(integer(minimum=1), 30000),
    "max_api_versions": Field(api_version_caps, {}),
    "tls": Field(upstream_tls_section, None),
    "sasl": Field(upstream_sasl, None),
}

METRICS_FIELDS = {
    # Port 0 lets tests and sidecars take an ephemeral port. A port alone binds loopback: the
    # endpoint is exposed on other interfaces only when the file says so (0.0.0.0:9404).
    "listen": Field(optional(host_port(allow_zero_port=True, bare_port_host="127.0.0.1")), None),
    "entity_expiry_seconds": Field(number(above=0), 3600),
    "max_entities": Field(integer(minimum=1), 10000),
    # kqp_topic_bytes_total per entity and topic: kqp then reads every Produce request's and Fetch
    # response's topics (off: only a topic pool's principals'); (entity, topic) pairs past
    # max_entities count under the topic "other".
    "topic_bytes": Field(boolean, False),
}

# Kafka's connection limits default to Int.MaxValue, no limit; kqp's are absent (null) likewise. The
# in-flight cap is on by default: it only pauses reading, and bounds what a pipelining client holds.
LIMITS_FIELDS = {
    "max_connections": Field(optional(integer(minimum=1)), None),
    "max_connections_per_ip": Field(optional(integer(minimum=1)), None),
    "connection_creation_rate_per_ip": Field(optional(number(above=0, note="connections per second")), None),
    "max_in_flight_per_connection": Field(optional(integer(minimum=1)), 1000),
}

TOP_FIELDS = {
    # Port 0 lets tests and sidecars take an ephemeral port.
    "listen": Field(host_port(allow_zero_port=True), "127.0.0.1:19092"),
    "advertised_host": Field(optional(host), None),  # None: the listen host
    "broker_port_base": Field(optional(integer(0, MAX_PORT, what="a port")), None),  # None: listen + 1
    "broker_ports": Field(port_pins, {}),
    "upstream": Field(section(UPSTREAM_FIELDS, UpstreamConfig), {}),
    "max_frame_bytes": Field(integer(minimum=1), 104857600),  # Kafka's socket.request.max.bytes
    "connections_max_idle_ms": Field(integer(minimum=1), 600000),
    "shutdown_grace_ms": Field(integer(minimum=0), 10000),
    "fetch_throttle": Field(choice(*FETCH_THROTTLE_MODES), "deliver"),
    "quotas": Field(lambda value, path: quota_section(value, path=path), {}),  # (QuotaSettings, FleetConfig)
    "metrics": Field(section(METRICS_FIELDS, MetricsConfig), {}),
    "limits": Field(section(LIMITS_FIELDS, LimitsConfig), {}),
    "tls": Field(tls_section, None),
    "sasl": Field(sasl_config, {}),
    "admin": Field(admin_config, {}),
    "authorization": Field(authorization_config, {}),
    "proxy_protocol": Field(proxy_protocol_section, {}),
}


class _StrictLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice in one mapping is an error, not "last one wins".

    The pure-Python parser, not libyaml's: config files are small, and its messages name the
    offending character ("found unknown escape character 'q'") where libyaml's do not.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key; the base constructor reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def read_yaml(text: str, source: str | None = None) -> object:
    """Parse YAML text into plain data, as a ConfigError with line and column if it is not YAML."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or "syntax error"
        context = f" ({exc.context})" if exc.context else ""
        raise ConfigError("", f"invalid YAML{where}: {problem}{context}", source) from None
    except yaml.YAMLError as exc:
        raise ConfigError("", f"invalid YAML: {exc}", source) from None


def read_file(path: str | os.PathLike[str]) -> object:
    """The plain data of a YAML file (live reload re-reads the file with this)."""
    source = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read the file: {exc.strerror or exc}", source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"not UTF-8 text (byte {exc.start})", source) from None
    return read_yaml(text, source)


def load_config(path: str | os.PathLike[str]) -> ProxyConfig:
    """Read and check a config file. Upstream brokers may still be missing: see with_overrides."""
    return parse_config(read_file(path), os.fspath(path))


def parse_config(data: object, source: str | None = None) -> ProxyConfig:
    """Check already-parsed data (a mapping; None, an empty file, means all defaults)."""
    try:
        return _parse(data, source)
    except ConfigError as exc:
        raise exc.with_source(source) from None


def with_overrides(
    cfg: ProxyConfig | None,
    *,
    upstream: str | None = None,
    listen: str | None = None,
    advertised_host: str | None = None,
) -> ProxyConfig:
    """Apply CLI flags over the file (or over defaults when there is no file), then insist on a
    complete config: a run needs upstream brokers from one or the other."""
    document: dict[str, Any] = dict(cfg.document) if cfg is not None else {}
    source = cfg.source if cfg is not None else None
    # Check each flag under its own name first, so the message points at the flag, not the file.
    if upstream is not None:
        host_port_list(upstream, "--upstream")
        document["upstream"] = {**(document.get("upstream") or {}), "bootstrap_servers": upstream}
    if listen is not None:
        TOP_FIELDS["listen"].check(listen, "--listen")
        document["listen"] = listen
    if advertised_host is not None:
        host(advertised_host, "--advertised-host")
        document["advertised_host"] = advertised_host
    result = parse_config(document, source)
    if not result.upstream.bootstrap_servers:
        raise ConfigError(
            "upstream.bootstrap_servers",
            "required: set it in the config file or pass --upstream host:port",
            source,
        )
    return result


def _parse(data: object, source: str | None) -> ProxyConfig:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError("", f"the top level must be a mapping of keys (listen:, upstream:, ...), got {shown(data)}")
    values = read_section(data, "", TOP_FIELDS)
    values["quotas"], values["fleet"] = values["quotas"]
    listen = values["listen"]
    values["advertised_host"] = _advertised_host(values["advertised_host"], listen.host)
    if values["broker_port_base"] is None:
        values["broker_port_base"] = _default_port_base(listen.port)
    _check_port_collisions(values)
    if values["proxy_protocol"].mode == "optional" and values["max_frame_bytes"] >= OPTIONAL_MAX_FRAME_BYTES:
        raise ConfigError("proxy_protocol.mode", f"optional needs max_frame_bytes below {OPTIONAL_MAX_FRAME_BYTES} "
                          "(a larger frame's first byte could start a PROXY header); use required")
    values["broker_ports"] = MappingProxyType(values["broker_ports"])
    values["authorization"] = _authorization(values["authorization"], values["sasl"].mode)
    return ProxyConfig(**values, source=source, document=_freeze(data))


def _authorization(authorization: AuthorizationConfig, sasl_mode: str) -> AuthorizationConfig:
    # On by default where kqp alone knows the user: in terminate mode every client would otherwise
    # act upstream as kqp's own user. Elsewhere it is a second line in front of the broker's own.
    if authorization.enabled is None:
        authorization = dataclasses.replace(authorization, enabled=sasl_mode == "terminate")
    if authorization.state_file is not None and not authorization.enabled:
        raise ConfigError("authorization.state_file", "only applies when authorization is enabled")
    return authorization


def _advertised_host(explicit: str | None, listen_host: str) -> str:
    # Clients connect to the advertised host, so it cannot be a wildcard; kqp will not guess a
    # hostname that might not resolve from where the clients run.
    chosen = explicit if explicit is not None else listen_host
    try:
        wildcard = ipaddress.ip_address(chosen).is_unspecified
    except ValueError:
        wildcard = False
    if not wildcard:
        return chosen
    if explicit is not None:
        raise ConfigError("advertised_host", f"clients cannot connect to the wildcard address {chosen!r}")
    raise ConfigError(
        "advertised_host",
        f"required when listen is a wildcard address ({listen_host}): set the host clients "
        "connect to (or pass --advertised-host)",
    )


def _default_port_base(listen_port: int) -> int:
    if listen_port == 0:
        return 0  # an ephemeral bootstrap port: ephemeral broker ports too
    if listen_port == MAX_PORT:
        raise ConfigError("broker_port_base", f"listen port {MAX_PORT} leaves no room for listen + 1; set it")
    return listen_port + 1


def _check_port_collisions(values: dict[str, Any]) -> None:
    # Only collisions that are certain: broker ports from the base depend on node ids not yet known.
    taken = {values["listen"].port: "listen"}
    metrics_listen = values["metrics"].listen
    if metrics_listen is not None and metrics_listen.port != 0:
        if metrics_listen.port in taken:
            raise ConfigError("metrics.listen", f"port {metrics_listen.port} is also the listen port")
        taken[metrics_listen.port] = "metrics.listen"
    for node, port in values["broker_ports"].items():
        if port in taken:
            raise ConfigError(f"broker_ports.{node}", f"port {port} is also {taken[port]}'s port")


def _freeze(value: object) -> object:
    if isinstance(value, Mapping):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(item) for item in value)
    return value
