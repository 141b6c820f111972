"""The keys OAUTHBEARER tokens are verified with: a JWKS from a URL or a file, kept fresh off the loop.

As Kafka's broker keeps them (RefreshingHttpsJwks): a URL's JWKS is fetched at start, again every
`jwks_refresh_ms`, and early when a token names a key id kqp does not have (`expedite`: at most
once a minute per key id, for at most 16 key ids at once, so tokens naming made-up ids cannot make
kqp hammer the identity provider); a file's is read at start and again when it changes. Fetches and
reads run in a worker thread (PyJWT's `PyJWKClient` over urllib; `jwks_ca` for an https URL's CA);
a fetch that fails keeps the keys in force and is logged, never the token that asked. The core
reads `current()`, a plain mapping of key id to PyJWT's `PyJWK`, swapped whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Mapping
from typing import Any

import jwt

from kqp.config.model import OAuthBearerConfig

from .reload import POLL_SECONDS, file_stamp

__all__ = ["Jwks"]

log = logging.getLogger("kqp.oauthbearer")

EXPEDITE_EVERY_SECONDS = 60.0   # Kafka's MISSING_KEY_ID_CACHE_IN_FLIGHT_MS
MAX_MISSING_KEY_IDS = 16        # Kafka's MISSING_KEY_ID_CACHE_MAX_ENTRIES
MAX_KEY_ID_LENGTH = 1000        # Kafka's MISSING_KEY_ID_MAX_KEY_LENGTH
RETRY_SECONDS = 5.0             # a first fetch that failed is tried again this often


def _by_kid(keys: Any) -> dict[str, Any]:
    """A JWKS document's usable keys by key id (a key without one under "")."""
    found = jwt.PyJWKSet.from_dict(keys if isinstance(keys, dict) else {"keys": []})
    return {key.key_id or "": key for key in found.keys}


class Jwks:
    def __init__(self, config: OAuthBearerConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.config, self.loop = config, loop
        self._keys: Mapping[str, Any] = {}
        self._asked: dict[str, float] = {}   # key id -> when an early fetch was last asked for it
        self._fetching: asyncio.Task[None] | None = None
        self._client = None if config.jwks_url is None else jwt.PyJWKClient(
            config.jwks_url, cache_jwk_set=False, timeout=config.jwks_timeout_ms / 1000,
            ssl_context=None if config.jwks_ca is None else ssl.create_default_context(cafile=config.jwks_ca))
        self.where = config.jwks_url or config.jwks_file or "?"

    def current(self) -> Mapping[str, Any]:
        return self._keys

    def expedite(self, kid: str) -> None:
        """A token named a key id kqp does not have: fetch the JWKS again soon (the login is refused)."""
        if self._client is None or len(kid) > MAX_KEY_ID_LENGTH:
            return
        now = self.loop.time()
        if now - self._asked.get(kid, -EXPEDITE_EVERY_SECONDS) < EXPEDITE_EVERY_SECONDS:
            return
        if kid not in self._asked and len(self._asked) >= MAX_MISSING_KEY_IDS:
            self._asked.pop(next(iter(self._asked)))
        self._asked[kid] = now
        log.info("JWKS %s: a token names key id %.64r kqp does not have; fetching the JWKS again", self.where, kid)
        self._fetch_soon()

    def _fetch_soon(self) -> None:
        if self._fetching is None or self._fetching.done():
            self._fetching = self.loop.create_task(self.refresh())

    def _read(self) -> dict[str, Any]:
        if self._client is not None:
            return _by_kid(self._client.fetch_data())
        assert self.config.jwks_file is not None
        with open(self.config.jwks_file, encoding="utf-8") as f:
            return _by_kid(json.load(f))

    async def refresh(self) -> bool:
        """Fetch (or read) the JWKS now; True when its keys are in force."""
        try:
            keys = await asyncio.to_thread(self._read)
        except (jwt.PyJWKClientError, jwt.PyJWKSetError, jwt.PyJWKError, OSError, ValueError) as exc:
            log.warning("JWKS %s: cannot load it, keeping the %d key(s) in force: %s", self.where, len(self._keys),
                        exc)
            return False
        if set(keys) != set(self._keys):
            log.info("JWKS %s: %d key(s) in force (%s)", self.where, len(keys), ", ".join(sorted(keys)) or "none")
        self._keys = keys
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Keep the keys fresh until `stop`: the URL's every `jwks_refresh_ms` (sooner while none loaded),
        the file's when it changes."""
        stamp = None if self.config.jwks_file is None else file_stamp(self.config.jwks_file)
        while not stop.is_set():
            wait = (self.config.jwks_refresh_ms / 1000 if self._keys else RETRY_SECONDS) if stamp is None \
                else POLL_SECONDS * 4
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if stop.is_set():
                return
            if self.config.jwks_file is not None:
                now = await asyncio.to_thread(file_stamp, self.config.jwks_file)
                if now == stamp:
                    continue
                stamp = now
            await self.refresh()
