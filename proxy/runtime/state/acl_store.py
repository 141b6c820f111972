"""The ACLs in force: the config file's, with the changes made through Kafka's admin API over them.

`AclStore` keeps the two layers as `QuotaStore` keeps quotas': the config file's
`authorization.acls` (with its super users and default, swapped on a reload: `rebase`) and the ACL
state file's (`commit`, for CreateAcls and DeleteAcls; followed when another process writes it), and
puts an `Authorizer` of their union in force through `apply` (the policies' `AclState`), so a request
read after a change is decided by the new ACLs. The state file is shared as the quota one is
(`state_file.SharedFile`): every kqp of a fleet that mounts it follows its changes. Every change of
the ACLs in force is audited (`acl_audit.py`) and kept in the state file's history.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable
from functools import partial

import yaml

from kqp.config.authorization_section import ACL_STATE_HEADER, acl_state_document, parse_acl_state
from kqp.config.errors import ConfigError
from kqp.config.loader import read_file
from kqp.config.model import AuthorizationConfig
from kqp.proxy.observability import quota_audit
from kqp.proxy.observability.acl_audit import AclAudit
from kqp.proxy.runtime.state.history import append_history
from kqp.proxy.runtime.state.quota_store import CommitFailed
from kqp.proxy.runtime.state.shared_file import SharedFile, write_atomically
from kqp.quotas.acls.admin_layer import EMPTY, AclChange, AclLayer, apply, in_force
from kqp.quotas.acls.authorizer import Authorizer
from kqp.quotas.acls.bindings import AclBinding

__all__ = ["AclStore", "open_acl_state", "read_acl_state"]

log = logging.getLogger("kqp.admin")


def read_acl_state(path: str) -> AclLayer:
    """The ACL state file's layer (ConfigError naming the file when it does not load); none yet: empty."""
    if not os.path.exists(path):
        return EMPTY
    return parse_acl_state(read_file(path), path)


def open_acl_state(path: str) -> AclLayer:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError("authorization.state_file", f"kqp cannot write in the directory {directory}")
    return read_acl_state(path)


class AclStore:
    def __init__(self, config: AuthorizationConfig, apply_authorizer: Callable[[Authorizer], None],
                 audit: AclAudit | None = None) -> None:
        self.config = config
        self.path = config.state_file
        self.layer = EMPTY if self.path is None else open_acl_state(self.path)   # one that does not load stops kqp
        self.file = None if self.path is None else SharedFile(self.path)
        self._apply = apply_authorizer
        self.audit = audit or AclAudit()
        self._apply(self.authorizer())
        self.audit.record(config.acls, self.in_force, None, quota_audit.STATE_FILE)   # the state file's, at start

    @property
    def in_force(self) -> frozenset[AclBinding]:
        return in_force(self.config.acls, self.layer)

    def authorizer(self) -> Authorizer:
        c = self.config
        return Authorizer(self.in_force, c.super_users, c.allow_everyone_if_no_acl_found)

    def rebase(self, config: AuthorizationConfig) -> None:
        """A config reload: its ACLs, super users and default, the state file's layer still over them."""
        before, self.config = self.in_force, config
        self._apply(self.authorizer())
        events = self.audit.record(before, self.in_force, None, quota_audit.RELOAD)
        if events and self.file is not None:
            self.file.submit(partial(self._append_history, events))

    async def commit(self, changes: Iterable[AclChange], who: str, loop: asyncio.AbstractEventLoop) -> None:
        """Write `changes` to the state file, then put them in force (CommitFailed: nothing changed)."""
        if self.file is None:
            raise CommitFailed("authorization.state_file is not set")
        base = self.config.acls
        layer, events = await self.file.write(partial(self._write, list(changes), who, base), loop)
        self._put(layer)
        self.audit.report(events)

    def _write(self, changes: list[AclChange], who: str, base: frozenset[AclBinding]) -> tuple[AclLayer, list]:
        """The state file re-read under the lock, changed, written and synced, the history appended."""
        assert self.path is not None
        try:
            before = read_acl_state(self.path)
            layer = apply(base, before, changes)
            write_atomically(self.path, ACL_STATE_HEADER + yaml.safe_dump(acl_state_document(layer), sort_keys=False))
        except ConfigError as exc:
            log.error("ACL change by %s refused: %s", who, exc)
            raise CommitFailed(str(exc)) from None
        except OSError as exc:
            log.error("ACL change by %s refused: cannot write %s: %s", who, self.path, exc)
            raise CommitFailed(f"cannot write the ACL state file {self.path}: {exc.strerror or exc}") from None
        events = self.audit.events(in_force(base, before), in_force(base, layer), who, quota_audit.ADMIN_API)
        self._append_history(events)
        return layer, events

    def _append_history(self, events: list) -> None:
        """The events into the history (the file's thread, its lock held); a history that cannot be
        written is logged and fails nothing (the change is durable already)."""
        assert self.path is not None
        try:
            append_history(self.path, events, write_atomically)
        except OSError as exc:
            log.error("ACL history beside %s not written (%d event(s) only in the log): %s",
                      self.path, len(events), exc.strerror or exc)

    def _put(self, layer: AclLayer) -> None:
        self.layer = layer
        self._apply(self.authorizer())

    async def refresh(self) -> None:
        """The state file changed under kqp (another process wrote it): take it, or keep the ACLs in force."""
        assert self.file is not None
        layer = await self.file.read(read_acl_state)
        if isinstance(layer, ConfigError):
            log.error("ACL state file changed but does not load; keeping the ACLs in force: %s", layer)
        elif layer is not None and layer != self.layer:
            before = self.in_force
            self._put(layer)
            self.audit.record(before, self.in_force, None, quota_audit.STATE_FILE)

    async def watch(self, stop: asyncio.Event) -> None:
        if self.file is not None:
            await self.file.watch(stop, self.refresh)

    def close(self, wait: bool = False) -> None:
        if self.file is not None:
            self.file.close(wait)
