"""Live reload of the config file: watched by polling its stat, and on SIGHUP.

Polling (a stat every 250 ms) rather than inotify: it needs no dependency, works on every file system
a ConfigMap can be mounted from, and follows Kubernetes' symlink swap (`..data` -> new directory),
which changes the inode the path resolves to. The `quotas` section, `fetch_throttle`,
`connections_max_idle_ms`, `limits` and the authorization's ACLs apply live (the measured rates are
kept: the quota manager swaps settings, not sensors; new limits apply to the next connection or
request, open connections stay); a change of any key in `_RESTART_KEYS` (or `_RESTART_SUBKEYS`) is
logged as needing a restart. A file that does not
load keeps the running config, logs one line naming the key, and counts as a failed reload. The stat,
the read and the parse run in a worker thread; only applying the new config runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable

from kqp.config.errors import ConfigError
from kqp.config.loader import load_config, with_overrides
from kqp.config.model import ProxyConfig
from kqp.quotas.model import QuotaSettings

log = logging.getLogger("kqp.reload")

POLL_SECONDS = 0.25
# Keys whose change needs a restart: kqp says so instead of half-applying them.
_RESTART_KEYS = ("listen", "advertised_host", "broker_port_base", "broker_ports", "upstream",
                 "max_frame_bytes", "metrics", "tls", "sasl", "fleet", "admin", "proxy_protocol")
_SHOWN = {"fleet": "quotas.scope/quotas.cluster"}  # ProxyConfig attributes not named as in the file
# Keys of a section that otherwise applies live (authorization's ACLs, super users, default).
_RESTART_SUBKEYS = (("authorization", "enabled"), ("authorization", "state_file"))


def file_stamp(path: str) -> tuple[int, int, int, float] | None:
    try:
        st = os.stat(path)  # follows symlinks, so a ConfigMap's atomic swap shows as a new inode
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime)


class ConfigReloader:
    def __init__(self, path: str, current: ProxyConfig,
                 apply_quotas: Callable[[QuotaSettings], list[str]],
                 on_result: Callable[[str], None] | None = None,
                 apply_runtime: Callable[[ProxyConfig], None] | None = None,
                 overrides: dict[str, str | None] | None = None) -> None:
        self.path = path
        self._overrides = overrides or {}
        self.current = current
        self._apply_quotas = apply_quotas
        self._apply_runtime = apply_runtime
        self._on_result = on_result or (lambda result: None)
        self._stamp = file_stamp(path)
        self._settling: tuple[int, int, int, float] | None = None
        self._wake = asyncio.Event()

    def _load(self) -> ProxyConfig:
        # The command line's flags still override the file, as they did at start.
        return with_overrides(load_config(self.path), **self._overrides)

    async def reload(self) -> bool:
        """Load the file now (off the loop) and apply it; True when the new config is in force."""
        try:
            new = await asyncio.to_thread(self._load)
        except ConfigError as exc:
            log.error("config reload failed, keeping the running config: %s", exc)
            self._on_result("failure")
            return False
        for key in _RESTART_KEYS:
            if getattr(new, key) != getattr(self.current, key):
                log.warning("config reload: a change of %r needs a restart; it is not applied", _SHOWN.get(key, key))
        for section, key in _RESTART_SUBKEYS:
            if getattr(getattr(new, section), key) != getattr(getattr(self.current, section), key):
                log.warning("config reload: a change of %r needs a restart; it is not applied", f"{section}.{key}")
        changes = self._apply_quotas(new.quotas)
        if self._apply_runtime is not None:
            self._apply_runtime(new)
        for line in changes:
            log.info("quota change: %s", line)
        if not changes:
            log.info("config reloaded: no quota changed")
        self.current = new
        self._on_result("success")
        return True

    async def _reload_guarded(self) -> None:
        """reload(), but an unexpected error is logged and counted instead of ending the watch:
        a task that died here would silently stop every later reload."""
        try:
            await self.reload()
        except Exception:
            log.exception("config reload failed unexpectedly, keeping the running config")
            self._on_result("failure")

    def request(self) -> None:
        """Ask for a reload from a signal handler or another thread-safe context."""
        self._wake.set()

    async def watch(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGHUP, self.request)
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
                forced = self._wake.is_set()
                self._wake.clear()
                stamp = await asyncio.to_thread(file_stamp, self.path)
                if forced:
                    log.info("SIGHUP: reloading %s", self.path)
                    self._stamp = stamp
                    await self._reload_guarded()
                elif stamp != self._stamp:
                    # Debounce one poll: an editor's write in progress must not count as a failure.
                    if stamp == self._settling:
                        self._stamp = stamp
                        await self._reload_guarded()
                    else:
                        self._settling = stamp
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGHUP)
