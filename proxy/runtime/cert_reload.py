"""TLS contexts that follow their files: a rotated certificate is in use without a restart.

Each `ReloadingContext` holds the context built from its config section and the stamps of the files
it was built from; `watch` polls them (a stat each, every `POLL_SECONDS`), the way the config file
is polled (`reload.py`, whose stamp it reuses, so a Kubernetes Secret's symlink swap counts as a
change). When a stamp changes and stays changed for one more poll (a writer half done must not be
read), the context is rebuilt; new connections get the new one, established connections keep
theirs, as with a broker's `ssl` reconfiguration. A rebuild that fails (a key that no longer
matches, a file caught mid-rotation) is logged as one line naming the key and the previous
context stays in force. The stats and the rebuild (which reads the files) run in a worker thread,
never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable

from kqp.config.errors import ConfigError

from .reload import file_stamp

log = logging.getLogger("kqp.tls")

POLL_SECONDS = 1.0

Stamps = tuple[object, ...]


class ReloadingContext:
    def __init__(self, name: str, build: Callable[[], ssl.SSLContext], files: tuple[str, ...]) -> None:
        self.name = name
        self._build = build
        self._files = files
        self._stamps = self._stat()
        self._settling: Stamps | None = None
        self.context = build()   # a ConfigError here stops kqp before it listens

    def _stat(self) -> Stamps:
        return tuple(file_stamp(path) for path in self._files)

    async def poll(self) -> bool:
        """One look at the files; True when a new context was built."""
        stamps = await asyncio.to_thread(self._stat)
        if stamps == self._stamps:
            self._settling = None
            return False
        if stamps != self._settling:
            self._settling = stamps      # changed since the last poll: wait one more
            return False
        self._stamps, self._settling = stamps, None
        try:
            self.context = await asyncio.to_thread(self._build)
        except ConfigError as exc:
            log.error("%s certificates changed but do not load, keeping the previous ones: %s", self.name, exc)
            return False
        log.info("%s certificates reloaded from %s; new connections use them", self.name, ", ".join(self._files))
        return True

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_SECONDS)
            if not stop.is_set():
                try:
                    await self.poll()
                except Exception:
                    # Not the files' fault: said loudly, and the watch goes on.
                    log.exception("%s certificate reload failed unexpectedly", self.name)


class UpstreamTls:
    """What an upstream connection passes to `create_connection` / `open_connection` for TLS."""

    def __init__(self, context: ReloadingContext, server_hostname: str | None) -> None:
        self._context = context
        self._server_hostname = server_hostname

    def connect_args(self, host: str) -> dict[str, object]:
        return {"ssl": self._context.context, "server_hostname": self._server_hostname or host}


def no_tls(host: str) -> dict[str, object]:
    """Plaintext upstream connections: nothing to add."""
    return {}
