"""The admin state file (`admin.state_file`): read at start, written atomically, followed live.

`QuotaStore` keeps the two layers of quota settings, the config file's (the base, swapped on a
config reload: `rebase`) and the admin API's (the state file: `commit`), and hands their overlay to
`apply`, the quota manager's `update_settings`: an admin change goes through exactly the path of a
config reload, so measurements and token buckets carry over.

A commit holds an exclusive lock (`flock` on `<state file>.lock`) while it re-reads the file, applies
the change and writes the result atomically: a temporary file in the same directory, fsync, rename
over the state file, fsync of the directory. Re-reading under the lock is what lets several
processes share one state file (`kqp run --workers N`, or kqp instances mounting one volume): each
sees the others' changes and none overwrites them. Every process also polls the file's stat (as the
config reloader does), so a change another process wrote is in force here within a poll.

The write blocks the event loop for one fsync: AlterClientQuotas is rare, and answering it only
once the change is durable is what Kafka's controller does too. A file that cannot be read or
written leaves everything as it was: at start kqp refuses to run; later, the change is refused
(UNKNOWN_SERVER_ERROR naming the file) or, for a file changed under kqp, the running layer is kept
and the error logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from types import MappingProxyType

import yaml

from kqp.config.admin_section import STATE_HEADER, parse_state, state_document
from kqp.config.errors import ConfigError
from kqp.config.loader import read_file
from kqp.proxy.policies.quota_admin import CommitFailed
from kqp.quotas.admin_layer import STATE_FILE, AdminLayer, Change, apply_changes, overlay
from kqp.quotas.model import QuotaSettings

from .reload import POLL_SECONDS, file_stamp

log = logging.getLogger("kqp.admin")


def read_state(path: str) -> AdminLayer:
    """The state file's layer (ConfigError naming the file when it does not load); a file that does
    not exist yet is an empty layer."""
    if not os.path.exists(path):
        return MappingProxyType({})
    return parse_state(read_file(path), path)


def write_atomically(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)   # the rename itself survives a crash
    finally:
        os.close(dir_fd)


class QuotaStore:
    def __init__(self, path: str, base: QuotaSettings, apply: Callable[[QuotaSettings], list[str]]) -> None:
        self.path, self.base = path, base
        directory = os.path.dirname(os.path.abspath(path))
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ConfigError("admin.state_file", f"kqp cannot write in the directory {directory}")
        self.layer = read_state(path)   # a file that does not load stops kqp here
        self._apply = apply
        self._stamp = file_stamp(path)

    @property
    def effective(self) -> QuotaSettings:
        return overlay(self.base, self.layer)

    def rebase(self, base: QuotaSettings) -> list[str]:
        """A config reload: the new base, with the admin layer still over it."""
        self.base = base
        return self._apply(self.effective)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(f"{self.path}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def commit(self, changes: list[Change], who: str) -> None:
        """Write `changes` to the state file, then put them in force (CommitFailed: nothing changed)."""
        try:
            with self._locked():
                layer = apply_changes(read_state(self.path), self.base, changes)
                text = STATE_HEADER + yaml.safe_dump(state_document(layer), sort_keys=False)
                write_atomically(self.path, text)
                self._stamp = file_stamp(self.path)
        except ConfigError as exc:
            log.error("quota change by %s refused: %s", who, exc)
            raise CommitFailed(str(exc)) from None
        except OSError as exc:
            log.error("quota change by %s refused: cannot write %s: %s", who, self.path, exc)
            raise CommitFailed(f"cannot write the state file {self.path}: {exc.strerror or exc}") from None
        self._put(layer, f"by {who}")

    def _put(self, layer: AdminLayer, how: str) -> None:
        self.layer = layer
        lines = self._apply(self.effective)
        for line in lines:
            log.info("quota change %s (%s %s): %s", how, STATE_FILE, self.path, line)
        if not lines:
            log.info("admin state file %s changed %s: no quota in force changed", self.path, how)

    def refresh(self) -> None:
        """The file changed under kqp (another worker or instance wrote it): take it, or keep the
        running layer if it does not load."""
        self._stamp = file_stamp(self.path)
        try:
            layer = read_state(self.path)
        except ConfigError as exc:
            log.error("admin state file changed but does not load; keeping the quotas in force: %s", exc)
            return
        if layer != self.layer:
            self._put(layer, "on disk")

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_SECONDS)
            if file_stamp(self.path) != self._stamp:
                try:
                    self.refresh()
                except Exception:   # as ConfigReloader._reload_guarded: a dead task would stop every later change
                    log.exception("admin state file %s: applying its change failed unexpectedly", self.path)
