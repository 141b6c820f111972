"""Certificates a TLS test makes for itself (trustme), written where kqp and the clients read them.

`TlsFiles(directory)` holds a CA, kqp's server certificate for 127.0.0.1 and localhost, and issues
client certificates with chosen subjects (trustme writes them as O, OU, CN, so Kafka renders
`CN=alice,OU=eng,O=Acme`), expired ones, and ones from a CA kqp does not trust. It also says how
each client is configured for them: the kqp `tls:` section, librdkafka's (confluent-kafka and kcat)
`security.protocol=SSL` settings, and a Python `ssl` context for raw sockets.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from cryptography.hazmat.primitives import serialization

ORGANIZATION, UNIT = "Acme", "eng"
# Kafka's rule for "the CN, lower-cased, of anyone in OU=eng": CN=Alice,OU=eng,O=Acme -> alice.
ENG_RULES = ["RULE:^CN=([^,]+),OU=eng,.*$/$1/L", "DEFAULT"]


@dataclass(frozen=True)
class ClientCert:
    cert: Path
    key: Path


class TlsFiles:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA(organization_name="kqp tests")
        self.ca_path = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_path))
        self.server_cert, self.server_key = directory / "kqp.pem", directory / "kqp.key"
        self.issue_server()
        self._other_ca: trustme.CA | None = None

    def issue_server(self, common_name: str = "kqp", hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> None:
        """(Re)write kqp's certificate and key (rotation writes both files again), naming `hosts`
        (a balancer's address too, when clients reach kqp through one)."""
        issued = self.ca.issue_cert(*hosts, common_name=common_name)
        _write_chain(issued, self.server_cert, self.server_key)

    def client(self, common_name: str, *, unit: str = UNIT, expired: bool = False,
               untrusted: bool = False, password: str | None = None) -> ClientCert:
        """A client certificate whose subject is CN=<common_name>,OU=<unit>,O=Acme (its key
        encrypted with `password` if given)."""
        ca = self.ca
        if untrusted:
            ca = self._other_ca = self._other_ca or trustme.CA(organization_name="not kqp's CA")
        validity: dict[str, Any] = {}
        if expired:
            validity = {"not_before": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
                        "not_after": datetime.datetime(2021, 1, 1, tzinfo=datetime.UTC)}
        issued = ca.issue_cert(f"{common_name.lower()}@example.com", common_name=common_name,
                               organization_name=ORGANIZATION, organization_unit_name=unit, **validity)
        tag = "-expired" if expired else "-untrusted" if untrusted else ""
        pair = ClientCert(self.dir / f"{common_name}{tag}.pem", self.dir / f"{common_name}{tag}.key")
        _write_chain(issued, pair.cert, pair.key)
        if password is not None:
            key = serialization.load_pem_private_key(pair.key.read_bytes(), None)
            pair.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.BestAvailableEncryption(password.encode())))
        return pair

    def server_context(self, client_ca: bool = True) -> ssl.SSLContext:
        """What a TLS upstream (the relay in front of Tansu) serves: kqp's certificate, which names
        127.0.0.1 and localhost, asking for a client certificate from this CA if `client_ca`."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.ca_path))
        ctx.load_cert_chain(str(self.server_cert), str(self.server_key))
        ctx.verify_mode = ssl.CERT_REQUIRED if client_ca else ssl.CERT_NONE
        return ctx

    def listener(self, **extra: Any) -> dict[str, Any]:
        """kqp's `tls:` section: this CA for clients (mTLS, required unless `extra` says otherwise)."""
        return {"cert": str(self.server_cert), "key": str(self.server_key), "client_ca": str(self.ca_path), **extra}

    def librdkafka(self, client: ClientCert | None = None) -> dict[str, str]:
        """confluent-kafka / kcat settings for SSL to kqp, with `client` as the client certificate."""
        conf = {"security.protocol": "SSL", "ssl.ca.location": str(self.ca_path)}
        if client is not None:
            conf.update({"ssl.certificate.location": str(client.cert), "ssl.key.location": str(client.key)})
        return conf

    def context(self, client: ClientCert | None = None) -> ssl.SSLContext:
        """A Python client context trusting this CA, presenting `client` if given."""
        ctx = ssl.create_default_context(cafile=str(self.ca_path))
        if client is not None:
            ctx.load_cert_chain(str(client.cert), str(client.key))
        return ctx


def _write_chain(issued: trustme.LeafCert, cert: Path, key: Path) -> None:
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    key.write_bytes(issued.private_key_pem.bytes())
