"""The ``sasl`` and ``upstream.sasl`` sections, and the users file, checked into config objects.

``sasl`` says who authenticates clients: ``none`` (every user is ANONYMOUS), ``terminate`` (kqp
runs the SASL exchange against its own users) or ``passthrough`` (the upstream does; kqp reads the
claimed name). ``upstream.sasl`` is kqp's own identity towards the upstream.

A user's secret is a password (plain text, verified by every mechanism) or SCRAM credentials per
mechanism (``salt``, ``iterations``, ``stored_key``, ``server_key``, base64 as `kqp sasl-credential`
writes them), which verify SCRAM and PLAIN without kqp ever holding the password. No message here
shows a secret: a wrong value is described by its kind, never quoted.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from kqp.config.errors import ConfigError
from kqp.config.model import (
    OAUTHBEARER,
    SASL_MECHANISMS,
    SASL_MODES,
    SCRAM_MECHANISMS,
    TERMINATED_MECHANISMS,
    OAuthBearerConfig,
    SaslConfig,
    ScramCredential,
    UpstreamSasl,
    UserSecret,
)
from kqp.config.schema import (
    Field,
    child,
    choice,
    did_you_mean,
    integer,
    name,
    optional,
    read_section,
    readable_file,
    section,
)

# RFC 7677 asks for at least 4096 iterations; more than ten million is a mistake (or an attack on kqp).
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 10_000_000
SCRAM_FIELDS = ("salt", "iterations", "stored_key", "server_key")


def _kind(value: object) -> str:
    return "a mapping" if isinstance(value, Mapping) else "a list" if isinstance(value, list) else type(value).__name__


def password(value: object, path: str) -> str:
    """A non-empty string; a wrong value is named by its type only, never shown."""
    if not isinstance(value, str) or not value:
        raise ConfigError(path, f"must be a non-empty string (quote it in YAML), got {_kind(value)}")
    return value


def _b64(value: object, path: str) -> bytes:
    if not isinstance(value, str):
        raise ConfigError(path, f"must be a base64 string, got {_kind(value)}")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(path, "must be a base64 string") from None
    if not raw:
        raise ConfigError(path, "must not be empty")
    return raw


def scram_credential(value: object, path: str) -> ScramCredential:
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a mapping of {', '.join(SCRAM_FIELDS)}, got {_kind(value)}")
    for key in value:
        if key not in SCRAM_FIELDS:
            raise ConfigError(child(path, key), f"unknown key; {did_you_mean(key, SCRAM_FIELDS)}")
    missing = [key for key in SCRAM_FIELDS if key not in value]
    if missing:
        raise ConfigError(path, f"missing {', '.join(missing)}")
    iterations = value["iterations"]
    if not isinstance(iterations, int) or isinstance(iterations, bool) \
            or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ConfigError(child(path, "iterations"), f"must be an integer in {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    return ScramCredential(salt=_b64(value["salt"], child(path, "salt")), iterations=iterations,
                           stored_key=_b64(value["stored_key"], child(path, "stored_key")),
                           server_key=_b64(value["server_key"], child(path, "server_key")))


def user_secret(value: object, path: str) -> UserSecret:
    """``name: password`` or ``name: {password: ..., SCRAM-SHA-256: {...}, SCRAM-SHA-512: {...}}``."""
    if isinstance(value, str):
        return UserSecret(password=password(value, path))
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a password or a mapping of SCRAM credentials, got {_kind(value)}")
    known = ("password", *SCRAM_MECHANISMS)
    for key in value:
        if key not in known:
            raise ConfigError(child(path, key), f"unknown key; {did_you_mean(key, known)}")
    if not value:
        raise ConfigError(path, "must give a password or SCRAM credentials")
    secret = password(value["password"], child(path, "password")) if "password" in value else None
    scram = {mech: scram_credential(value[mech], child(path, mech)) for mech in SCRAM_MECHANISMS if mech in value}
    return UserSecret(password=secret, scram=MappingProxyType(scram))


def users(value: object, path: str) -> Mapping[str, UserSecret]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a mapping of user name to password or SCRAM credentials, got {_kind(value)}")
    return MappingProxyType({name(user, path): user_secret(secret, child(path, user))
                             for user, secret in value.items()})


def mechanisms(value: object, path: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(path, f"must be a non-empty list of {', '.join(TERMINATED_MECHANISMS)}")
    check = choice(*TERMINATED_MECHANISMS)
    return tuple(dict.fromkeys(check(item, f"{path}[{i}]") for i, item in enumerate(value)))


def read_users_file(path: str, where: str) -> Mapping[str, UserSecret]:
    """The users file: YAML, the same mapping as ``sasl.users``. Errors name the file's key."""
    # The loader imports this module, so its reader is imported late.
    from kqp.config.loader import read_file

    try:
        return users(read_file(path), "")
    except ConfigError as exc:
        inner = f"{exc.key}: " if exc.key else ""
        raise ConfigError(where, f"{path}: {inner}{exc.message}") from None


def _jwks_url(value: object, path: str) -> str:
    text = name(value, path)
    if not text.startswith(("https://", "http://")):
        raise ConfigError(path, f"must be an https:// (or http://) URL, got {text!r}")
    return text


def _audience(value: object, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ConfigError(path, "must be a string or a non-empty list of strings")
    return tuple(name(item, f"{path}[{i}]") for i, item in enumerate(items))


OAUTHBEARER_FIELDS = {
    "jwks_url": Field(optional(_jwks_url), None),
    "jwks_file": Field(optional(readable_file), None),
    "jwks_refresh_ms": Field(integer(minimum=1000), 3600000),   # Kafka's sasl.oauthbearer.jwks.endpoint.refresh.ms
    "jwks_timeout_ms": Field(integer(minimum=1), 10000),
    "jwks_ca": Field(optional(readable_file), None),
    "issuer": Field(optional(name), None),                     # Kafka's sasl.oauthbearer.expected.issuer
    "audience": Field(_audience, None),                        # Kafka's sasl.oauthbearer.expected.audience
    "clock_skew_seconds": Field(integer(minimum=0), 30),       # Kafka's sasl.oauthbearer.clock.skew.seconds
}


def oauthbearer(value: object, path: str) -> OAuthBearerConfig | None:
    if value is None:
        return None
    config = section(OAUTHBEARER_FIELDS, OAuthBearerConfig)(value, path)
    if (config.jwks_url is None) == (config.jwks_file is None):
        raise ConfigError(path, "needs exactly one of jwks_url and jwks_file (where the keys that sign tokens are)")
    if config.jwks_ca is not None and config.jwks_url is None:
        raise ConfigError(child(path, "jwks_ca"), "only applies with jwks_url")
    return config


SASL_FIELDS = {
    "mode": Field(choice(*SASL_MODES), "none"),
    "mechanisms": Field(mechanisms, list(SASL_MECHANISMS)),
    "users": Field(users, None),
    "users_file": Field(optional(readable_file), None),
    # the JWT claim OAUTHBEARER's principal comes from (Kafka's sasl.oauthbearer.sub.claim.name)
    "principal_claim": Field(name, "sub"),
    "oauthbearer": Field(oauthbearer, None),
    # Kafka's connections.max.reauth.ms: a terminated login's session lasts this long at most (KIP-368)
    "max_reauth_ms": Field(optional(integer(minimum=1)), None),
}


def sasl_config(value: object, path: str) -> SaslConfig:
    values: dict[str, Any] = read_section(value, path, SASL_FIELDS)
    given = value if isinstance(value, Mapping) else {}
    mode = values["mode"]
    if mode != "terminate":
        for key in ("mechanisms", "users", "users_file", "oauthbearer", "max_reauth_ms"):
            if key in given:
                raise ConfigError(child(path, key), f"only applies to mode terminate (mode is {mode})")
    file_users: Mapping[str, UserSecret] = MappingProxyType({})
    if values["users_file"] is not None:
        file_users = read_users_file(values["users_file"], child(path, "users_file"))
        for user in file_users:
            if user in values["users"]:
                raise ConfigError(child(child(path, "users"), user), f"also in users_file {values['users_file']}")
    if mode == "terminate":
        has_users = bool(values["users"] or file_users)
        if "mechanisms" not in given:   # what the section gives the means for, PLAIN and SCRAM first
            values["mechanisms"] = (*(SASL_MECHANISMS if has_users else ()),
                                    *((OAUTHBEARER,) if values["oauthbearer"] is not None else ()))
        if not values["mechanisms"]:
            raise ConfigError(path, "mode terminate needs users or users_file (PLAIN, SCRAM), or sasl.oauthbearer")
        oauth = OAUTHBEARER in values["mechanisms"]
        if oauth and values["oauthbearer"] is None:
            raise ConfigError(child(path, "oauthbearer"), "required with OAUTHBEARER among the mechanisms: "
                                                          "jwks_url or jwks_file, the keys that sign tokens")
        if not oauth and values["oauthbearer"] is not None:
            raise ConfigError(child(path, "mechanisms"), "must list OAUTHBEARER when sasl.oauthbearer is set")
        if not has_users and any(m != OAUTHBEARER for m in values["mechanisms"]):
            raise ConfigError(path, "mode terminate needs users or users_file for PLAIN and SCRAM "
                                    "(or mechanisms: [OAUTHBEARER] with sasl.oauthbearer)")
        _check_mechanisms_served({**file_users, **values["users"]}, values["mechanisms"], child(path, "users"))
    return SaslConfig(**values, file_users=file_users)


def _check_mechanisms_served(all_users: Mapping[str, UserSecret], enabled: tuple[str, ...], path: str) -> None:
    """A user with SCRAM credentials only cannot use a SCRAM mechanism it has none for; say so now
    rather than at the user's first failed login."""
    for user, secret in all_users.items():
        if secret.password is None and not any(m == "PLAIN" or m in secret.scram for m in enabled):
            raise ConfigError(child(path, user), f"has credentials for none of the enabled mechanisms "
                                                 f"({', '.join(enabled)})")


UPSTREAM_SASL_FIELDS = {
    "mechanism": Field(choice(*SASL_MECHANISMS), None),
    "username": Field(name, None),
    "password": Field(optional(password), None),
    # The password as a file's content (a mounted Kubernetes Secret), one trailing newline dropped.
    "password_file": Field(optional(readable_file), None),
}


def upstream_sasl(value: object, path: str) -> UpstreamSasl | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        for key in ("mechanism", "username"):
            if key not in value:
                raise ConfigError(child(path, key), "required when upstream.sasl is set")
        if ("password" in value) == ("password_file" in value):
            raise ConfigError(path, "needs exactly one of password and password_file")
    values = read_section(value, path, UPSTREAM_SASL_FIELDS)
    if values["password_file"] is not None:
        where = child(path, "password_file")
        try:
            with open(values["password_file"], encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(where, f"cannot read it: {type(exc).__name__}") from None
        values["password"] = password(text.removesuffix("\n").removesuffix("\r"), where)
    return UpstreamSasl(**values)
