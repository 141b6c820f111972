"""Certificates for the TLS references of `kqp bench`, made once per run with trustme.

One CA signs kqp's (and the TLS relay's) certificate for 127.0.0.1 and the clients' certificate,
so the TLS cells measure what a deployment with mutual TLS pays: the clients present a certificate
that kqp verifies and maps to a user, and kqp verifies the upstream's when TLS is on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CLIENT_NAME = "kqp-bench"


@dataclass(frozen=True)
class BenchCerts:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def librdkafka(self) -> dict[str, str]:
        """The clients' settings for SSL to kqp."""
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.ca),
                "ssl.certificate.location": str(self.client_cert), "ssl.key.location": str(self.client_key)}


def bench_certs(directory: Path) -> BenchCerts:
    """The run's certificates under `directory`, made on first use."""
    certs = BenchCerts(*(directory / name for name in ("ca.pem", "server.pem", "server.key", "client.pem",
                                                       "client.key")))
    if all(path.exists() for path in (certs.ca, certs.server_cert, certs.server_key, certs.client_cert,
                                      certs.client_key)):
        return certs
    import trustme  # the bench extra's; imported here so a run without TLS references needs none of it

    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="kqp bench")
    ca.cert_pem.write_to_path(str(certs.ca))
    for issued, cert, key in ((ca.issue_cert("127.0.0.1", "localhost"), certs.server_cert, certs.server_key),
                              (ca.issue_cert(f"{CLIENT_NAME}@example.com", common_name=CLIENT_NAME),
                               certs.client_cert, certs.client_key)):
        cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        key.write_bytes(issued.private_key_pem.bytes())
    return certs
