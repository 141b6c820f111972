"""A file whose read takes as long as a test says, and a probe of how long the event loop stalled.

`slow_file` puts a named pipe (FIFO) where a file was: opening it for reading blocks until a writer
opens it, so a reader waits, in the kernel, until the helper's thread has held it `hold` seconds and
then writes the file's text. Nothing of kqp's is replaced: kqp opens and reads a path as always, and
a slow disk or network mount is what it meets. `LoopProbe` runs a 10 ms timer on the running loop
and keeps the longest gap between two of its wake-ups: a read done on the loop shows as a gap as
long as the read.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path


class SlowWriter:
    """What the writer's thread saw: whether a reader came, and how long it was kept waiting."""

    def __init__(self) -> None:
        self.held = 0.0             # seconds between the reader's arrival and the text written
        self.error: BaseException | None = None


@contextlib.contextmanager
def slow_file(path: Path, text: str, hold: float, wait_for_reader: float = 20.0) -> Iterator[SlowWriter]:
    """Replace `path` with a FIFO whose reader gets `text` `hold` seconds after it opened it.

    On leaving, the writer's thread is joined and `path` is a regular file holding `text` again
    (so later stats and reads behave as for any file)."""
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    writer = SlowWriter()

    def feed() -> None:
        try:
            deadline = time.monotonic() + wait_for_reader
            while True:   # a non-blocking open for writing fails with ENXIO until a reader has the FIFO open
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                    break
                except OSError as exc:
                    if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                        raise
                    time.sleep(0.005)
            arrived = time.monotonic()
            try:
                time.sleep(hold)
                os.set_blocking(fd, True)
                os.write(fd, text.encode())
                writer.held = time.monotonic() - arrived
            finally:
                os.close(fd)
        except BaseException as exc:   # said by the test, not lost in a thread
            writer.error = exc

    thread = threading.Thread(target=feed, name="slow-file", daemon=True)
    thread.start()
    try:
        yield writer
    finally:
        thread.join(wait_for_reader + hold + 5)
        path.unlink(missing_ok=True)
        path.write_text(text)


class LoopProbe:
    """The longest the running loop took to wake a 10 ms timer, over the `running()` block."""

    TICK = 0.01

    def __init__(self) -> None:
        self.longest = 0.0
        self._last = 0.0

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        while True:
            await asyncio.sleep(self.TICK)
            now = loop.time()
            self.longest = max(self.longest, now - self._last)
            self._last = now

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LoopProbe]:
        task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)   # started before the code under test runs
        try:
            yield self
        finally:
            # A stall that ended just now has not woken the timer yet: it counts up to this moment.
            self.longest = max(self.longest, asyncio.get_running_loop().time() - self._last)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
