"""An asyncio event loop running in a daemon thread: the home of the tests' relays.

The wire tap and the saturated upstream serve sockets while the test's own thread drives blocking
clients; each runs its servers on a loop of its own, started here, and calls into it with
`asyncio.run_coroutine_threadsafe`. The loop closes when it is stopped (`loop.stop()` from a
coroutine on it), and the thread ends with it.
"""

from __future__ import annotations

import asyncio
import threading


def loop_in_thread(name: str, timeout: float = 10.0) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """A new loop, already running in a daemon thread called `name`, and that thread."""
    ready = threading.Event()
    box: list[asyncio.AbstractEventLoop] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        box.append(loop)
        loop.call_soon(ready.set)
        loop.run_forever()
        loop.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    if not ready.wait(timeout):
        raise TimeoutError(f"{name}: its event loop did not start within {timeout:.0f}s")
    return box[0], thread
