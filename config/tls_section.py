"""The ``tls:`` section (kqp's listeners) and ``upstream.tls:`` (kqp's connections to the brokers).

Each is one table of fields plus the checks that span several keys: a key and its password, a client
CA and the client-auth mode, a certificate and its key. Files are checked readable here; whether a
key matches its certificate or its password is right is found when kqp builds its TLS contexts
(`kqp.proxy.tls.contexts`), which `kqp check-config` and `kqp run` do before anything listens, and
reported as the same one-line error naming the key. The principal mapping rules are parsed here, so
a rule Kafka would refuse never reaches a handshake.

Passwords are :class:`Secret` values: no error, log line or repr ever shows them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kqp.config.errors import ConfigError, shown
from kqp.config.model import CLIENT_AUTH_MODES, Secret, TlsConfig, UpstreamTlsConfig
from kqp.config.schema import (
    Field,
    boolean,
    child,
    choice,
    host,
    integer,
    optional,
    read_section,
    readable_file,
    secret,
)
from kqp.quotas.principal_mapping import DEFAULT_RULES, PrincipalMapper, RuleError, parse_rules

_PASSWORD_FIELDS = {
    "key_password": Field(optional(secret), None),
    "key_password_file": Field(optional(readable_file), None),   # read when the key is loaded
}

TLS_FIELDS = {
    "enabled": Field(boolean, True),
    "cert": Field(optional(readable_file), None),
    "key": Field(optional(readable_file), None),
    **_PASSWORD_FIELDS,
    "client_ca": Field(optional(readable_file), None),
    "client_auth": Field(optional(choice(*CLIENT_AUTH_MODES)), None),   # None: required if client_ca is set
    "principal_mapping_rules": Field(lambda value, path: mapping_rules(value, path), list(DEFAULT_RULES)),
    "handshake_timeout_ms": Field(integer(minimum=1), 10000),
}

UPSTREAM_TLS_FIELDS = {
    "enabled": Field(boolean, True),
    "ca": Field(optional(readable_file), None),          # None: the system's trust store
    "cert": Field(optional(readable_file), None),
    "key": Field(optional(readable_file), None),
    **_PASSWORD_FIELDS,
    "server_hostname": Field(optional(host), None),
    "verify_hostname": Field(boolean, True),
}


def mapping_rules(value: object, path: str) -> PrincipalMapper:
    """Kafka's ssl.principal.mapping.rules: a list of rules, or Kafka's one comma-separated string."""
    if isinstance(value, str):
        items = [(path, value)]
    elif isinstance(value, list | tuple) and value:
        items = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    else:
        raise ConfigError(path, f"must be a list of rules (\"RULE:pattern/replacement/\", \"DEFAULT\"), "
                                f"got {shown(value)}")
    rules = []
    for where, item in items:
        if not isinstance(item, str):
            raise ConfigError(where, f"must be a rule string, got {shown(item)}")
        try:
            rules.extend(parse_rules(item).rules)
        except RuleError as exc:
            raise ConfigError(where, str(exc)) from None
    return PrincipalMapper(tuple(rules))


def _password(values: dict[str, Any], path: str) -> None:
    if values["key_password"] is not None and values["key_password_file"] is not None:
        raise ConfigError(child(path, "key_password_file"), "set key_password or key_password_file, not both")
    if values["key"] is None and (values["key_password"] or values["key_password_file"]):
        raise ConfigError(child(path, "key_password"), "a key password needs a key")


def tls_section(value: object, path: str) -> TlsConfig | None:
    """``tls:`` absent, null or ``enabled: false``: plaintext listeners."""
    if value is None:
        return None
    values = read_section(value, path, TLS_FIELDS)
    for key in ("cert", "key"):
        if values[key] is None:
            raise ConfigError(child(path, key), "required: TLS listeners need a certificate and its key")
    _password(values, path)
    auth = values["client_auth"]
    if auth is None:
        auth = values["client_auth"] = "required" if values["client_ca"] is not None else "none"
    if auth != "none" and values["client_ca"] is None:
        raise ConfigError(child(path, "client_ca"), f"required with client_auth: {auth} (the CA that signs "
                                                    "client certificates)")
    if not values.pop("enabled"):
        return None
    return TlsConfig(**values)


def upstream_tls_section(value: object, path: str) -> UpstreamTlsConfig | None:
    """``upstream.tls:`` absent, null or ``enabled: false``: plaintext to the brokers."""
    if value is None:
        return None
    values = read_section(value, path, UPSTREAM_TLS_FIELDS)
    if (values["cert"] is None) != (values["key"] is None):
        missing = "key" if values["key"] is None else "cert"
        raise ConfigError(child(path, missing), "cert and key go together (kqp's client certificate)")
    _password(values, path)
    if not values.pop("enabled"):
        return None
    return UpstreamTlsConfig(**values)


def tls_document(tls: TlsConfig | UpstreamTlsConfig | None, *, reveal_secrets: bool) -> dict[str, object] | None:
    """The section as the file writes it; a password is ``***`` unless ``reveal_secrets``."""
    if tls is None:
        return None
    out: dict[str, object] = {}
    for f in dataclasses.fields(tls):
        key, value = f.name, getattr(tls, f.name)
        if isinstance(value, Secret):
            value = value.reveal() if reveal_secrets else "***"
        elif isinstance(value, PrincipalMapper):
            value = [str(rule) for rule in value.rules]
        if value is not None:
            out[key] = value
    return out
