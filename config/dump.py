"""A ProxyConfig written back as plain YAML data, every default spelled out.

What for: showing the effective configuration (after defaults and CLI overrides) to an operator,
and the round-trip test that keeps the loader honest: ``parse_config(config_document(cfg)) == cfg``.
The output uses the file's own forms (``host:port`` strings, lists, ``<default>``), never Python
objects, so ``yaml.safe_dump`` can write it. It is a document to parse again, so it holds the
SASL secrets as the file gave them: never log it.
"""

from __future__ import annotations

import base64
import dataclasses

from kqp.config.model import AuthorizationConfig, HostPort, ProxyConfig, SaslConfig, UserSecret
from kqp.config.proxy_protocol_section import proxy_protocol_document
from kqp.config.quota_section import quota_document
from kqp.config.tls_section import tls_document


def _address(value: HostPort | None) -> str | None:
    return None if value is None else str(value)


MASK = "***"


def _secret(secret: UserSecret, reveal: bool) -> object:
    password = secret.password if reveal or secret.password is None else MASK
    if not secret.scram and password is not None:
        return password
    out: dict[str, object] = {} if password is None else {"password": password}
    for mechanism, cred in secret.scram.items():
        if not reveal:
            out[mechanism] = MASK
            continue
        out[mechanism] = {"salt": base64.b64encode(cred.salt).decode(), "iterations": cred.iterations,
                          "stored_key": base64.b64encode(cred.stored_key).decode(),
                          "server_key": base64.b64encode(cred.server_key).decode()}
    return out


def _sasl(sasl: SaslConfig, reveal: bool) -> dict[str, object]:
    out: dict[str, object] = {"mode": sasl.mode, "principal_claim": sasl.principal_claim}
    if sasl.mode == "terminate":
        out["mechanisms"] = list(sasl.mechanisms)
        out["users"] = {user: _secret(secret, reveal) for user, secret in sasl.users.items()}
        if sasl.users_file is not None:
            out["users_file"] = sasl.users_file
        if sasl.oauthbearer is not None:
            out["oauthbearer"] = {**dataclasses.asdict(sasl.oauthbearer), "audience": list(sasl.oauthbearer.audience)}
        out["max_reauth_ms"] = sasl.max_reauth_ms
    return out


def _authorization(authorization: AuthorizationConfig) -> dict[str, object]:
    return {"enabled": authorization.enabled, "super_users": list(authorization.super_users),
            "allow_everyone_if_no_acl_found": authorization.allow_everyone_if_no_acl_found,
            "acls": [binding.as_dict() for binding in sorted(authorization.acls)],
            "state_file": authorization.state_file}


def config_document(cfg: ProxyConfig, *, reveal_secrets: bool = False) -> dict[str, object]:
    """The mapping that :func:`kqp.config.loader.parse_config` reads back as ``cfg``. Secrets (key
    passwords, SASL passwords and credentials) are written as ``***`` unless ``reveal_secrets`` (a
    document that must load back as ``cfg``); a password read from a file stays in its file."""
    upstream: dict[str, object] = {
        "connect_timeout_ms": cfg.upstream.connect_timeout_ms,
        "metadata_refresh_ms": cfg.upstream.metadata_refresh_ms,
        "max_api_versions": dict(cfg.upstream.max_api_versions),
    }
    # An empty list would be refused on the way back in; absent means "not set yet".
    if cfg.upstream.bootstrap_servers:
        upstream["bootstrap_servers"] = [str(server) for server in cfg.upstream.bootstrap_servers]
    if cfg.upstream.sasl is not None:
        up = cfg.upstream.sasl
        secret = ({"password_file": up.password_file} if up.password_file
                  else {"password": up.password if reveal_secrets else MASK})
        upstream["sasl"] = {"mechanism": up.mechanism, "username": up.username, **secret}
    if cfg.upstream.tls is not None:
        upstream["tls"] = tls_document(cfg.upstream.tls, reveal_secrets=reveal_secrets)
    document: dict[str, object] = {
        "listen": str(cfg.listen),
        "advertised_host": cfg.advertised_host,
        "broker_port_base": cfg.broker_port_base,
        "broker_ports": dict(cfg.broker_ports),
        "upstream": upstream,
        "max_frame_bytes": cfg.max_frame_bytes,
        "connections_max_idle_ms": cfg.connections_max_idle_ms,
        "shutdown_grace_ms": cfg.shutdown_grace_ms,
        "fetch_throttle": cfg.fetch_throttle,
        "quotas": quota_document(cfg.quotas, cfg.fleet),
        "metrics": {
            "listen": _address(cfg.metrics.listen),
            "entity_expiry_seconds": cfg.metrics.entity_expiry_seconds,
            "max_entities": cfg.metrics.max_entities,
            "topic_bytes": cfg.metrics.topic_bytes,
        },
        "limits": dataclasses.asdict(cfg.limits),
        "sasl": _sasl(cfg.sasl, reveal_secrets),
        "admin": {"manage_quotas": cfg.admin.manage_quotas, "principals": list(cfg.admin.principals),
                  "describe_principals": (None if cfg.admin.describe_principals is None
                                          else list(cfg.admin.describe_principals)),
                  "state_file": cfg.admin.state_file},
        "authorization": _authorization(cfg.authorization),
        "proxy_protocol": proxy_protocol_document(cfg.proxy_protocol),
    }
    if cfg.tls is not None:
        document["tls"] = tls_document(cfg.tls, reveal_secrets=reveal_secrets)
    return document
