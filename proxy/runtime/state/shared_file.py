"""A state file several kqp processes share: written under a lock in one thread, followed by all.

The quota admin API's state file and the ACL state file are kept alike: a write holds `flock` on
`<file>.lock` while it re-reads the file, changes it and writes it atomically (temporary file,
fsync, rename, fsync of the directory), so processes sharing one file (`--workers`, instances on one
volume) never overwrite each other; each polls the file's stat to follow the others. Writes run in
the file's one thread, in the order asked; reads in a worker thread; never on the event loop. A
read that a write of this process overlaps is dropped as stale: the write puts in force what it
read under the lock. `SharedFile` is that mechanism; what the file holds is its owner's.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from kqp.config.errors import ConfigError
from kqp.proxy.runtime.reload import POLL_SECONDS, file_stamp

__all__ = ["SharedFile", "write_atomically"]

log = logging.getLogger("kqp.admin")
T = TypeVar("T")
Stamp = tuple[int, int, int, float] | None


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


class SharedFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp = file_stamp(path)
        self._writer: ThreadPoolExecutor | None = None   # one thread: writes in the order asked
        self._writing = 0   # writes under way: the watch leaves the file to them meanwhile
        self._writes = 0    # writes begun: a read older than the last one is stale

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with open(f"{self.path}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    async def write(self, work: Callable[[], T], loop: asyncio.AbstractEventLoop) -> T:
        """`work` (which reads, changes and writes the file) in the file's thread under the lock; its result."""
        writer = self._pool()
        self._writing += 1
        self._writes += 1
        try:
            result, stamp = await loop.run_in_executor(writer, self._locked, work)
        finally:
            self._writing -= 1
        self._stamp = stamp
        return result

    def _locked(self, work: Callable[[], T]) -> tuple[T, Stamp]:
        with self.locked():
            result = work()
            return result, file_stamp(self.path)

    def submit(self, work: Callable[[], None]) -> Future[None]:
        """`work` in the file's thread, under the lock, after the writes asked before it."""
        return self._pool().submit(lambda: self._locked(work)[0])

    def _pool(self) -> ThreadPoolExecutor:
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kqp-state-file")
        return self._writer

    def close(self, wait: bool = False) -> None:
        """No more writes; one under way still finishes: the interpreter waits for its thread, or this
        call does with `wait`."""
        if self._writer is not None:
            self._writer.shutdown(wait=wait)
            self._writer = None

    async def read(self, load: Callable[[str], T]) -> T | ConfigError | None:
        """The file as `load` reads it (off the loop), or why it does not load; None when a write of
        this process is under way or began meanwhile (it puts in force what it read itself)."""
        if self._writing:
            return None
        writes = self._writes

        def read() -> tuple[Stamp, T | ConfigError]:
            stamp = file_stamp(self.path)   # a change after this is seen by the next poll
            try:
                return stamp, load(self.path)
            except ConfigError as exc:
                return stamp, exc

        stamp, got = await asyncio.to_thread(read)
        if writes != self._writes:
            return None
        self._stamp = stamp
        return got

    async def watch(self, stop: asyncio.Event, changed: Callable[[], Awaitable[None]]) -> None:
        """Call `changed` whenever another process changed the file, until `stop`."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_SECONDS)
            if await asyncio.to_thread(file_stamp, self.path) == self._stamp:
                continue
            try:
                await changed()
            except Exception:   # as ConfigReloader._reload_guarded: a dead task would stop every later change
                log.exception("state file %s: applying its change failed unexpectedly", self.path)
