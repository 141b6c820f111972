"""A saturated broker for tests: `kqp.proxy.bench.saturated_relay` on a loop of its own, in a thread.

The relay (one FIFO drained at C bytes/s, bounded, with backpressure; its module says how) is what
adaptive pools and service classes are measured against. `SaturatedUpstream` runs it on its own
loop in a daemon thread (the wire tap's pattern), its methods called from the test's thread;
Tansu must advertise the relay's port, so that every connection a client makes after Metadata
comes back through the FIFO: `saturated_tansu()` starts both. `drained` (time, bytes) and `waits`
(the queueing delay of every frame, with the client id its header names) are what tests measure.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from upstreams import launch

from kqp.proxy.bench.saturated_relay import SaturatedRelay, Wait

from .loop_thread import loop_in_thread
from .net import LOOPBACK, free_port

__all__ = ["SaturatedUpstream", "Wait", "saturated_tansu"]

STEP_TIMEOUT = 10.0


class SaturatedUpstream(SaturatedRelay):
    """The relay in a thread: `start()`, `relay_to(broker)`, point clients at `bootstrap`."""

    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    def start(self) -> SaturatedUpstream:
        self._loop, self._thread = loop_in_thread("saturated-upstream", STEP_TIMEOUT)
        self._call(self.listen(LOOPBACK, 0))
        return self

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def shutdown() -> None:
            self.close()
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        thread.join(STEP_TIMEOUT)

    def __enter__(self) -> SaturatedUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_capacity(self, capacity: float) -> None:
        """A new C from now on, from the test's thread."""
        async def change() -> None:
            self.change_capacity(capacity)

        self._call(change())

    def _call(self, step: Coroutine[Any, Any, Any]) -> Any:
        assert self._loop is not None, "start() the relay first"
        return asyncio.run_coroutine_threadsafe(step, self._loop).result(STEP_TIMEOUT)


@contextmanager
def saturated_tansu(log_path: Path, capacity: float, **options: Any) -> Iterator[SaturatedUpstream]:
    """A Tansu broker advertising a `SaturatedUpstream` in front of it; clients use `relay.bootstrap`."""
    with SaturatedUpstream(capacity, **options) as relay:
        with launch.tansu(log_path, port=free_port(), advertised_port=relay.port) as broker:
            relay.relay_to(broker)
            yield relay
