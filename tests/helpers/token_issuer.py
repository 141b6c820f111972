"""A small OAuth identity provider for the OAUTHBEARER tests: a JWKS and a token endpoint over HTTP.

`TokenIssuer` runs `http.server` on a free loopback port in a thread: `GET /jwks.json` serves the
public keys (made with `cryptography`, RSA and EC), `POST /token` answers the OAuth client-credentials
grant Kafka's Java client sends (`sasl.oauthbearer.token.endpoint.url`), HTTP Basic auth naming the
client id, with a JWT signed by the issuer's key: `sub` is the client id, with the issuer, audience,
`iat` and `exp` (`lifetime` seconds) the tests configure. `token(...)` signs one directly, for
clients that take a token as is (kafka-python's token provider, librdkafka's `oauth_cb`). A client
id in `bad` gets the token that name says (`wrong-signature`: signed by a key the JWKS does not
have; `wrong-issuer`, `wrong-audience`, `expired`). Every request served is counted by path.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from .net import LOOPBACK

ISSUER, AUDIENCE = "https://idp.kqp.test", "kafka"


class TokenIssuer:
    def __init__(self, lifetime: float = 3600.0) -> None:
        self.lifetime = lifetime
        self.keys = {"rsa-1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
                     "ec-1": ec.generate_private_key(ec.SECP256R1())}
        self.stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)   # not in the JWKS
        self.served: Counter[str] = Counter()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.served[self.path] += 1
                self._send(200, issuer.jwks()) if self.path == "/jwks.json" else self._send(404, {})

            def do_POST(self) -> None:
                issuer.served[self.path] += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                basic = self.headers.get("Authorization", "").removeprefix("Basic ")
                client_id = base64.b64decode(basic).decode().partition(":")[0] if basic else "anonymous"
                self._send(200, {"access_token": issuer.token(client_id), "token_type": "Bearer",
                                 "expires_in": int(issuer.lifetime)})

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:   # quiet
                pass

        self.server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="token-issuer", daemon=True)

    def __enter__(self) -> TokenIssuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in self.keys.items():
            algorithm = jwt.algorithms.RSAAlgorithm if kid.startswith("rsa") else jwt.algorithms.ECAlgorithm
            keys.append({**algorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid, "use": "sig"})
        return {"keys": keys}

    def token(self, subject: str, **claims: Any) -> str:
        """A token for `subject` (a client id in the `bad` names gets the token that name says)."""
        now = time.time()
        body: dict[str, Any] = {"sub": subject, "iss": ISSUER, "aud": AUDIENCE, "iat": int(now),
                                "exp": int(now + self.lifetime), "scope": "kafka"}
        key, kid = self.keys["rsa-1"], "rsa-1"
        if subject == "wrong-signature":
            key = self.stranger
        elif subject == "wrong-issuer":
            body["iss"] = "https://evil.example"
        elif subject == "wrong-audience":
            body["aud"] = "billing"
        elif subject == "expired":
            body["iat"], body["exp"] = int(now - 7200), int(now - 3600)
        body.update(claims)
        return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})

    def java_settings(self, client_id: str) -> dict[str, str]:
        """Kafka's Java client logging in with OAUTHBEARER through this issuer's token endpoint."""
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                "sasl.login.callback.handler.class":
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                "sasl.oauthbearer.token.endpoint.url": f"{self.url}/token",
                "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                                    f'clientId="{client_id}" clientSecret="not-checked";'}

    def java_options(self) -> list[str]:
        """The JVM's allow-list of OAuth URLs (Kafka 4 refuses any other)."""
        return [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.url}/token"]
