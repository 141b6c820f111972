"""TLS contexts from the config, their reload, why a handshake was refused, and the refusal log.

No sockets: contexts are built from files a test writes (helpers.tls), the reload is polled by
hand, and the refusal log runs on a fake clock.
"""

from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path
from typing import Any

import pytest
from helpers.tls import TlsFiles

from kqp.config import ConfigError, parse_config
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.runtime.cert_reload import ReloadingContext, UpstreamTls
from kqp.proxy.runtime.refusals import RefusalLog
from kqp.proxy.tls.contexts import client_context, server_context, watched_files
from kqp.proxy.tls.peers import PeerIdentity, Refusal, Refused, handshake_refusal
from kqp.quotas.principal_mapping import parse_rules

PASSWORD = "correct horse"


@pytest.fixture
def certs(tmp_path: Path) -> TlsFiles:
    return TlsFiles(tmp_path)


def tls(**section: Any) -> Any:
    return parse_config({"upstream": {"bootstrap_servers": "k:1"}, "tls": section}).tls


def upstream_tls(**section: Any) -> Any:
    return parse_config({"upstream": {"bootstrap_servers": "k:1", "tls": section}}).upstream.tls


def refusal_of(section_builder: Any, **section: Any) -> str:
    with pytest.raises(ConfigError) as info:
        section_builder(**section)
    return str(info.value).removeprefix("config error: ")


@pytest.mark.parametrize(("client_auth", "mode"), [
    ("required", ssl.CERT_REQUIRED), ("requested", ssl.CERT_OPTIONAL), ("none", ssl.CERT_NONE)])
def test_client_auth_is_kafka_s_ssl_client_auth(certs: TlsFiles, client_auth: str, mode: ssl.VerifyMode) -> None:
    ctx = server_context(tls(**certs.listener(client_auth=client_auth)))
    assert ctx.verify_mode == mode
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_upstream_context_verifies_certificates_and_host_names(certs: TlsFiles) -> None:
    ctx = client_context(upstream_tls(ca=str(certs.ca_path)))
    assert (ctx.verify_mode, ctx.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert client_context(upstream_tls(ca=str(certs.ca_path), verify_hostname=False)).check_hostname is False


def test_encrypted_keys_with_a_password_or_a_password_file(certs: TlsFiles, tmp_path: Path) -> None:
    client = certs.client("kqp", password=PASSWORD)
    password_file = tmp_path / "pw"
    password_file.write_text(PASSWORD + "\n")   # a trailing newline, as `echo` writes it, is not part of it
    for given in ({"key_password": PASSWORD}, {"key_password_file": str(password_file)}):
        client_context(upstream_tls(cert=str(client.cert), key=str(client.key), **given))


def test_key_problems_name_the_key_to_fix(certs: TlsFiles) -> None:
    alice, bob = certs.client("Alice"), certs.client("Bob")
    locked = certs.client("Locked", password=PASSWORD)
    mismatched = certs.listener(key=str(bob.key), cert=str(alice.cert))
    assert refusal_of(lambda **s: server_context(tls(**s)), **mismatched) == (
        f"tls.key: {str(bob.key)!r} is not the key of the certificate in {str(alice.cert)!r}")
    assert refusal_of(lambda **s: client_context(upstream_tls(**s)), cert=str(locked.cert), key=str(locked.key)) == (
        f"upstream.tls.key: {str(locked.key)!r} is encrypted: set key_password or key_password_file")
    wrong = refusal_of(lambda **s: client_context(upstream_tls(**s)), cert=str(locked.cert), key=str(locked.key),
                       key_password="not " + PASSWORD)
    assert wrong == f"upstream.tls.key_password: does not decrypt {str(locked.key)!r}"
    assert PASSWORD not in wrong


def test_files_that_are_not_pem(certs: TlsFiles, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    assert refusal_of(lambda **s: server_context(tls(**s)), **certs.listener(cert=str(junk))) == (
        f"tls.cert: {str(junk)!r} holds no PEM certificate")
    assert refusal_of(lambda **s: server_context(tls(**s)), **certs.listener(key=str(junk))).startswith(
        f"tls.key: {str(junk)!r} holds no PEM private key")
    assert refusal_of(lambda **s: server_context(tls(**s)), **certs.listener(client_ca=str(junk))).startswith(
        f"tls.client_ca: {str(junk)!r} holds no PEM certificate")


def test_watched_files(certs: TlsFiles, tmp_path: Path) -> None:
    listener = tls(**certs.listener())
    assert watched_files(listener) == (str(certs.server_cert), str(certs.server_key), str(certs.ca_path))
    assert watched_files(upstream_tls()) == ()


def test_upstream_connections_name_the_broker_or_the_override(certs: TlsFiles) -> None:
    context = ReloadingContext("upstream", lambda: client_context(upstream_tls(ca=str(certs.ca_path))), ())
    assert UpstreamTls(context, None).connect_args("b1.kafka") == {"ssl": context.context,
                                                                   "server_hostname": "b1.kafka"}
    assert UpstreamTls(context, "kafka").connect_args("b1.kafka")["server_hostname"] == "kafka"


# -- reload -----------------------------------------------------------------------------------------

def bump(path: Path) -> None:
    """Make a rewrite visible to a stat even within the file system's timestamp granularity."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))


async def test_a_changed_file_is_reloaded_after_it_settles(certs: TlsFiles) -> None:
    section = tls(**certs.listener())
    reloading = ReloadingContext("listener", lambda: server_context(section), watched_files(section))
    first = reloading.context
    assert not await reloading.poll()
    certs.issue_server("kqp-2")
    bump(certs.server_cert)
    bump(certs.server_key)
    assert not await reloading.poll(), "a change is read only once it has held for a whole poll"
    assert await reloading.poll()
    assert reloading.context is not first
    assert not await reloading.poll()


async def test_a_rotation_that_does_not_load_keeps_the_old_context(certs: TlsFiles,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    section = tls(**certs.listener())
    reloading = ReloadingContext("listener", lambda: server_context(section), watched_files(section))
    first = reloading.context
    certs.server_key.write_bytes(certs.client("Mallory").key.read_bytes())   # a key of another certificate
    bump(certs.server_key)
    with caplog.at_level(logging.ERROR, logger="kqp.tls"):
        assert not await reloading.poll() and not await reloading.poll()
    assert reloading.context is first
    assert "do not load, keeping the previous ones: config error: tls.key:" in caplog.text


# -- refusals ---------------------------------------------------------------------------------------

def verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    exc.reason, exc.verify_code, exc.verify_message = "CERTIFICATE_VERIFY_FAILED", code, message
    return exc


def ssl_error(reason: str) -> ssl.SSLError:
    exc = ssl.SSLError(1, reason)
    exc.reason = reason
    return exc


@pytest.mark.parametrize(("exc", "reason", "cause"), [
    (ssl_error("WRONG_VERSION_NUMBER"), "tls_plaintext", "not TLS (a plaintext client on a TLS listener?)"),
    (ssl_error("HTTP_REQUEST"), "tls_plaintext", "not TLS (a plaintext client on a TLS listener?)"),
    (verify_error(10, "certificate has expired"), "tls_certificate_expired", "client certificate has expired"),
    (verify_error(20, "unable to get local issuer certificate"), "tls_certificate_rejected",
     "client certificate rejected: unable to get local issuer certificate"),
    (ssl_error("PEER_DID_NOT_RETURN_A_CERTIFICATE"), "tls_certificate_rejected",
     "no client certificate (client_auth: required)"),
    (ssl_error("NO_SHARED_CIPHER"), "tls_handshake_failed", "TLS handshake failed: NO_SHARED_CIPHER"),
    (ConnectionAbortedError("SSL handshake is taking longer than 10.0 seconds: aborting the connection"),
     "tls_handshake_failed", "TLS handshake timed out"),
    (ConnectionResetError(), "client_closed", "the client closed the connection during the TLS handshake"),
])
def test_why_a_handshake_was_refused(exc: BaseException, reason: str, cause: str) -> None:
    assert (handshake_refusal(exc).reason, handshake_refusal(exc).cause) == (reason, cause)


def test_no_certificate_is_anonymous_and_an_unmapped_subject_is_refused(certs: TlsFiles) -> None:
    identity = PeerIdentity(parse_rules("RULE:^CN=([^,]+),OU=eng,.*$/$1/L"))
    assert identity.user(None) == "ANONYMOUS"
    der = ssl.PEM_cert_to_DER_cert(certs.client("Alice").cert.read_text())
    assert identity.user(der) == "alice"
    with pytest.raises(Refused) as info:
        identity.user(ssl.PEM_cert_to_DER_cert(certs.client("Olga", unit="ops").cert.read_text()))
    assert info.value.refusal == Refusal("tls_principal_unmapped",
                                         "no principal_mapping_rules rule applies to 'CN=Olga,OU=ops,O=Acme'")
    with pytest.raises(Refused, match="maps to an empty user"):
        PeerIdentity(parse_rules("RULE:^CN=.*$//")).user(der)


class Counted(ProxyObserver):
    def __init__(self) -> None:
        self.refused: list[tuple[str, str]] = []

    def connection_refused(self, listener: str, reason: str) -> None:
        self.refused.append((listener, reason))


def test_every_refusal_is_counted_but_each_cause_logged_once_a_second(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    observer = Counted()
    log = RefusalLog(observer, lambda: now[0])
    plaintext = Refusal("tls_plaintext", "not TLS")
    expired = Refusal("tls_certificate_expired", "client certificate has expired")
    with caplog.at_level(logging.DEBUG, logger="kqp.tls"):
        for t in (0.0, 0.1, 0.5, 0.99):        # t = 0: logged; the other three within the second: counted only
            now[0] = t
            log("bootstrap", "10.0.0.1:5000", plaintext)
        log("broker-1", "10.0.0.2:5000", expired)   # another cause: logged at once
        now[0] = 1.2
        log("bootstrap", "10.0.0.1:5001", plaintext)    # a second later: logged, with the three between
        log("bootstrap", "10.0.0.3:5000", Refusal("client_closed", "left", warn=False))
    assert len(observer.refused) == 7
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "refused client 10.0.0.1:5000 on bootstrap: not TLS",
        "refused client 10.0.0.2:5000 on broker-1: client certificate has expired",
        "refused client 10.0.0.1:5001 on bootstrap: not TLS (3 more refused for this since the last report)",
    ]
