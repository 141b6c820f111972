"""The admin state file (`admin.state_file`): read at start, written atomically, followed live.

`QuotaStore` keeps the two layers of quota settings, the config file's (swapped on a reload:
`rebase`) and the admin API's (`commit`), and hands their overlay to the quota manager's
`update_settings`: an admin change takes a reload's path, so measurements carry over.

The file is shared as `state_file.SharedFile` shares one: a commit re-reads it under `flock`,
applies the change and writes it atomically in the store's one thread, and every process follows
it; the AlterClientQuotas answer goes once the change is durable. Every change of the quotas in
force passes `_changed` with who made it, its source and the settings before and after: the one
hook of the audit trail (`kqp.proxy.observability.quota_audit`) and of the history
(state/history.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from functools import partial
from types import MappingProxyType

import yaml

from kqp.config.admin_section import STATE_HEADER, parse_state, state_document
from kqp.config.errors import ConfigError
from kqp.config.loader import read_file
from kqp.proxy.observability import quota_audit
from kqp.proxy.observability.quota_audit import AuditEvent, QuotaAudit
from kqp.proxy.runtime.state.history import append_history
from kqp.proxy.runtime.state.shared_file import SharedFile, write_atomically
from kqp.quotas.admin_layer import CONFIG_FILE, STATE_FILE, AdminLayer, Change, apply_changes, overlay
from kqp.quotas.model import QuotaSettings

__all__ = ["ADMIN_API", "CommitFailed", "QuotaStore", "open_state", "read_state", "write_atomically"]

log = logging.getLogger("kqp.admin")

ADMIN_API = "admin API"   # where a change came from, besides the state file (on disk) and the config file
_AUDIT_SOURCE = {ADMIN_API: quota_audit.ADMIN_API, CONFIG_FILE: quota_audit.RELOAD, STATE_FILE: quota_audit.STATE_FILE}


class CommitFailed(Exception):
    """The state file could not be written: nothing changed (the message says why)."""


def read_state(path: str) -> AdminLayer:
    """The state file's layer (ConfigError naming the file when it does not load); a file that does
    not exist yet is an empty layer."""
    if not os.path.exists(path):
        return MappingProxyType({})
    return parse_state(read_file(path), path)


def open_state(path: str) -> AdminLayer:
    """The state file's layer, as kqp starts with it; ConfigError when kqp could not keep it (a
    directory it cannot write in) or it does not load."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError("admin.state_file", f"kqp cannot write in the directory {directory}")
    return read_state(path)


class QuotaStore:
    def __init__(self, path: str, base: QuotaSettings, apply: Callable[[QuotaSettings], list[str]],
                 audit: QuotaAudit | None = None) -> None:
        self.path, self.base = path, base
        self.layer = open_state(path)   # a file that does not load stops kqp here
        self._apply = apply
        self.audit = audit or QuotaAudit()
        self.file = SharedFile(path)

    @property
    def effective(self) -> QuotaSettings:
        return overlay(self.base, self.layer)

    def rebase(self, base: QuotaSettings) -> list[str]:
        """A config reload: the new base, with the admin layer still over it."""
        before, self.base = self.effective, base
        return self._changed(before, None, CONFIG_FILE)

    async def commit(self, changes: Iterable[Change], who: str, loop: asyncio.AbstractEventLoop) -> None:
        """Write `changes` to the state file in the store's thread, then put them in force on the loop
        (CommitFailed: nothing changed)."""
        layer, events = await self.file.write(partial(self._write, list(changes), who, self.base), loop)
        self._put(layer, who, ADMIN_API, events)

    def _write(self, changes: list[Change], who: str, base: QuotaSettings) -> tuple[AdminLayer, list[AuditEvent]]:
        """The state file re-read under the lock, changed, written and synced, then the change's events
        appended to the history (the store's thread)."""
        try:
            before = read_state(self.path)
            layer = apply_changes(before, base, changes)
            write_atomically(self.path, STATE_HEADER + yaml.safe_dump(state_document(layer), sort_keys=False))
            events = self.audit.events(overlay(base, before), overlay(base, layer), who, quota_audit.ADMIN_API)
            self._append_history(events)
            return layer, events
        except ConfigError as exc:
            log.error("quota change by %s refused: %s", who, exc)
            raise CommitFailed(str(exc)) from None
        except OSError as exc:
            log.error("quota change by %s refused: cannot write %s: %s", who, self.path, exc)
            raise CommitFailed(f"cannot write the state file {self.path}: {exc.strerror or exc}") from None

    def close(self, wait: bool = False) -> None:
        """No more commits; one under way (or a reload's history append) still finishes."""
        self.file.close(wait)

    def _append_history(self, events: list[AuditEvent]) -> None:
        """The events into the history (the store's thread, the lock held). The change is already
        durable and in force: a history that cannot be written is logged, and fails nothing."""
        if not events:
            return
        try:
            append_history(self.path, events, write_atomically)
        except OSError as exc:
            log.error("quota history beside %s not written (%d event(s) only in the log): %s",
                      self.path, len(events), exc.strerror or exc)

    def _put(self, layer: AdminLayer, who: str | None, source: str, events: list[AuditEvent] | None = None) -> None:
        before, self.layer = self.effective, layer
        self._changed(before, who, source, events)

    def _changed(self, before: QuotaSettings, who: str | None, source: str,
                 events: list[AuditEvent] | None = None) -> list[str]:
        """The quotas in force become `self.effective` (were `before`), changed by `who` from `source`:
        one audit event per entity changed (`events` when the commit computed them), logged and
        counted; a reload's also go to the history, in the store's thread."""
        lines = self._apply(self.effective)
        if events is None:
            events = self.audit.events(before, self.effective, who, _AUDIT_SOURCE[source])
        self.audit.report(events)
        if source == CONFIG_FILE:
            if events:
                self.file.submit(partial(self._append_history, events)).add_done_callback(_log_failure)
            return lines   # the reloader logs a reload's lines itself
        how = f"by {who}" if who else "on disk"
        for line in lines:
            log.info("quota change %s (%s %s): %s", how, STATE_FILE, self.path, line)
        if not lines:
            log.info("admin state file %s changed %s: no quota in force changed", self.path, how)
        return lines

    async def refresh(self) -> None:
        """The file changed under kqp (another worker or instance wrote it): take it, or keep the
        running layer if it does not load."""
        layer = await self.file.read(read_state)
        if isinstance(layer, ConfigError):
            log.error("admin state file changed but does not load; keeping the quotas in force: %s", layer)
        elif layer is not None and layer != self.layer:
            self._put(layer, None, STATE_FILE)

    async def watch(self, stop: asyncio.Event) -> None:
        await self.file.watch(stop, self.refresh)


def _log_failure(done: Future[None]) -> None:
    """A reload's history append that failed unexpectedly (an OSError is logged where it happens)."""
    if not done.cancelled() and done.exception() is not None:
        log.error("quota history: recording a reload failed", exc_info=done.exception())
