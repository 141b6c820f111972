"""SSL contexts built from the config: one for kqp's listeners, one for its connections upstream.

Built when kqp starts (and by `kqp check-config`), and again whenever a certificate, key, CA or
password file changes (`kqp.proxy.runtime.cert_reload`). Everything that can go wrong while loading
the files is raised as a one-line :class:`ConfigError` naming the key to fix: a key that does not
match its certificate, an encrypted key without its password, a password that does not decrypt it,
a file that is not PEM. OpenSSL's own messages ("PEM lib") say none of that.

The listener context asks for client certificates as Kafka's `ssl.client.auth` says (`required`,
`requested`, `none`); the upstream context verifies the brokers' certificates and, unless told not
to, their host names (Kafka's `ssl.endpoint.identification.algorithm=https`). Both speak TLS 1.2
and 1.3, as Kafka's `ssl.enabled.protocols` does by default.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from kqp.config.errors import ConfigError
from kqp.config.model import ProxyConfig, Secret, TlsConfig, UpstreamTlsConfig

__all__ = ["check_tls", "client_context", "server_context", "watched_files"]

_VERIFY_MODES = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


def server_context(tls: TlsConfig) -> ssl.SSLContext:
    """The context of every kqp listener."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, "tls", tls.cert, tls.key, tls.key_password, tls.key_password_file)
    if tls.client_ca is not None:
        _load_ca(ctx, "tls.client_ca", tls.client_ca)
    ctx.verify_mode = _VERIFY_MODES[tls.client_auth]
    return ctx


def client_context(tls: UpstreamTlsConfig) -> ssl.SSLContext:
    """The context of kqp's connections to the brokers, forwarding and control alike."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)   # verifies the peer and its host name by default
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.ca is not None:
        _load_ca(ctx, "upstream.tls.ca", tls.ca)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = tls.verify_hostname
    if tls.cert is not None and tls.key is not None:
        _load_chain(ctx, "upstream.tls", tls.cert, tls.key, tls.key_password, tls.key_password_file)
    return ctx


def watched_files(tls: TlsConfig | UpstreamTlsConfig) -> tuple[str, ...]:
    """The files a context is built from: a change of any of them means a rebuild."""
    if isinstance(tls, TlsConfig):
        paths = (tls.cert, tls.key, tls.client_ca, tls.key_password_file)
    else:
        paths = (tls.ca, tls.cert, tls.key, tls.key_password_file)
    return tuple(p for p in paths if p is not None)


def check_tls(config: ProxyConfig) -> None:
    """Build every context the config asks for, so a bad file stops kqp before it listens."""
    if config.tls is not None:
        server_context(config.tls)
    if config.upstream.tls is not None:
        client_context(config.upstream.tls)


def _load_ca(ctx: ssl.SSLContext, key: str, path: str) -> None:
    try:
        ctx.load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        raise ConfigError(key, f"{path!r} holds no PEM certificate ({exc.reason or exc})") from None
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path!r}: {exc.strerror or exc}") from None


def _load_chain(ctx: ssl.SSLContext, section: str, cert: str, key: str, password: Secret | None,
                password_file: str | None) -> None:
    asked: list[bool] = []
    secret = _password_reader(section, password, password_file)

    def give_password() -> bytes:
        # Always a callable: without one OpenSSL would prompt on the terminal for an encrypted key.
        asked.append(True)
        return secret()

    try:
        ctx.load_cert_chain(cert, key, password=give_password)
    except ssl.SSLError as exc:
        raise _chain_error(section, cert, key, exc, asked=bool(asked),
                           has_password=password is not None or password_file is not None) from None
    except OSError as exc:
        raise ConfigError(f"{section}.cert", f"cannot read {cert!r} or {key!r}: {exc.strerror or exc}") from None


def _password_reader(section: str, password: Secret | None, password_file: str | None) -> Callable[[], bytes]:
    def read() -> bytes:
        if password is not None:
            return password.reveal().encode()
        if password_file is None:
            return b""
        try:
            with open(password_file, "rb") as f:
                return f.read().rstrip(b"\r\n")
        except OSError as exc:
            raise ConfigError(f"{section}.key_password_file",
                              f"cannot read {password_file!r}: {exc.strerror or exc}") from None

    return read


def _chain_error(section: str, cert: str, key: str, exc: ssl.SSLError, *, asked: bool,
                 has_password: bool) -> ConfigError:
    if exc.reason == "KEY_VALUES_MISMATCH":
        return ConfigError(f"{section}.key", f"{key!r} is not the key of the certificate in {cert!r}")
    if asked and not has_password:
        return ConfigError(f"{section}.key", f"{key!r} is encrypted: set key_password or key_password_file")
    if asked:
        return ConfigError(f"{section}.key_password", f"does not decrypt {key!r}")
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.load_verify_locations(cafile=cert)
    except ssl.SSLError:
        return ConfigError(f"{section}.cert", f"{cert!r} holds no PEM certificate")
    return ConfigError(f"{section}.key", f"{key!r} holds no PEM private key ({exc.reason or exc})")
