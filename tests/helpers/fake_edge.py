"""A hand-cranked loop with tasks, and transports that write down what is done to them, for the edge.

uvicorn's way of testing a Protocol (tests/protocols: a MockLoop, a MockTransport): the connection's
edge (`kqp.proxy.runtime.edge`) takes its loop from `EdgeWiring`, so a test hands it an `EdgeLoop`:
the clock and timers of `helpers.quota_fakes.FakeLoop` (moved only by `advance`), tasks that run
only when `run_ready` steps them, a `create_connection` the test answers (`PendingConnect`), and a
`run_in_executor` whose jobs wait until the test runs them (in a thread of their own). Everything an
effect awaits is a `FakeFuture`, so no real event loop is involved and nothing sleeps.

`FakeTransport` records every call the edge makes (`write`, `writelines`, `pause_reading`,
`resume_reading`, `close`, `set_write_buffer_limits`) in `calls`, and can call its protocol's
`pause_writing` from inside a `write` once more than `high_water` bytes were written, as asyncio's
transports do, to show that events raised while actions run are queued.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any

from .quota_fakes import FakeLoop

__all__ = ["EdgeLoop", "FakeFuture", "FakeTask", "FakeTransport", "PendingConnect", "deliver"]


def deliver(protocol: Any, data: bytes, read: int = 65_536) -> int:
    """`data` arriving on a socket as a buffered transport hands it over (uvloop's way with an
    `asyncio.BufferedProtocol`): each read asks `get_buffer` where to go and fills at most `read`
    bytes of it, then `buffer_updated` says how many. The number of reads it took."""
    pos = reads = 0
    while pos < len(data):
        buf = protocol.get_buffer(read)
        n = min(len(buf), read, len(data) - pos)
        assert n > 0, "get_buffer gave no room"
        buf[:n] = data[pos:pos + n]
        del buf   # released before buffer_updated, as a transport releases it
        pos += n
        reads += 1
        protocol.buffer_updated(n)
    return reads


class FakeFuture:
    """What a fake effect awaits: done when the test (or a job) sets it."""

    def __init__(self, loop: EdgeLoop) -> None:
        self._loop = loop
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.waiters: list[FakeTask] = []

    def set_result(self, value: Any = None) -> None:
        self.done, self.result = True, value
        self._loop.ready.extend(self.waiters)

    def set_exception(self, error: BaseException) -> None:
        self.done, self.error = True, error
        self._loop.ready.extend(self.waiters)

    def __await__(self) -> Generator[FakeFuture, None, Any]:
        if not self.done:
            yield self
        if self.error is not None:
            raise self.error
        return self.result


class FakeTask:
    """A coroutine stepped by `EdgeLoop.run_ready`, with asyncio.Task's done-callback surface."""

    def __init__(self, loop: EdgeLoop, coro: Coroutine[Any, Any, Any]) -> None:
        self._loop, self._coro = loop, coro
        self._callbacks: list[Callable[[FakeTask], object]] = []
        self._done = self._cancelled = self._stepping = self._cancel_asked = False
        self._error: BaseException | None = None
        loop.ready.append(self)

    def step(self) -> None:
        if self._done:
            return
        self._stepping = True
        try:
            awaited = self._coro.send(None)
        except StopIteration:
            self._finish()
        except asyncio.CancelledError:
            self._cancelled = True
            self._finish()
        except Exception as exc:   # the task's outcome, kept as asyncio.Task keeps it
            self._error = exc
            self._finish()
        else:
            assert isinstance(awaited, FakeFuture), f"a fake task awaited {awaited!r}"
            awaited.waiters.append(self)
        finally:
            self._stepping = False
        if self._cancel_asked and not self._done:   # cancelled while it ran: it stops at the await it reached
            self.cancel()

    def cancel(self) -> bool:
        if self._done:
            return False
        if self._stepping:   # cancelled from inside its own step (asyncio: at its next await)
            self._cancel_asked = True
            return True
        self._coro.close()   # GeneratorExit at its await, as a cancelled task unwinds
        self._cancelled = True
        self._finish()
        return True

    def _finish(self) -> None:
        self._done = True
        for callback in self._callbacks:
            callback(self)

    def add_done_callback(self, callback: Callable[[FakeTask], object]) -> None:
        self._callbacks.append(callback)

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return self._cancelled

    def exception(self) -> BaseException | None:
        return self._error


@dataclass
class PendingConnect:
    """A `create_connection` the test answers: `succeed()` makes the transport, `fail(error)` refuses."""

    loop: EdgeLoop
    factory: Callable[[], asyncio.Protocol]
    host: str
    port: int
    kwargs: dict[str, Any]
    future: FakeFuture

    def succeed(self, **transport: Any) -> FakeTransport:
        protocol = self.factory()
        sock = FakeTransport(protocol, peer=(self.host, self.port), **transport)
        protocol.connection_made(sock)  # type: ignore[arg-type]
        self.future.set_result((sock, protocol))
        self.loop.run_ready()
        return sock

    def fail(self, error: BaseException) -> None:
        self.future.set_exception(error)
        self.loop.run_ready()


class EdgeLoop(FakeLoop):
    """The fake loop's clock and timers, plus tasks, connections and executor jobs the test drives."""

    def __init__(self, start: float = 100.0) -> None:
        super().__init__(start)
        self.ready: list[FakeTask] = []
        self.tasks: list[FakeTask] = []
        self.connects: list[PendingConnect] = []
        self.jobs: list[tuple[Callable[..., Any], tuple[Any, ...], FakeFuture]] = []

    def create_task(self, coro: Coroutine[Any, Any, Any]) -> FakeTask:
        task = FakeTask(self, coro)
        self.tasks.append(task)
        return task

    def run_ready(self) -> None:
        """Step every task that can go on, until none can (bounded)."""
        for _ in range(10_000):
            if not self.ready:
                return
            self.ready.pop(0).step()
        raise AssertionError("tasks kept waking each other")

    async def create_connection(self, factory: Callable[[], asyncio.Protocol], host: str, port: int,
                                **kwargs: Any) -> tuple[FakeTransport, asyncio.Protocol]:
        future = FakeFuture(self)
        self.connects.append(PendingConnect(self, factory, host, port, kwargs, future))
        return await future

    def run_in_executor(self, executor: object, fn: Callable[..., Any], *args: Any) -> FakeFuture:
        future = FakeFuture(self)
        self.jobs.append((fn, args, future))
        return future

    def run_jobs(self) -> list[str]:
        """Run the executor jobs, each in a thread of its own (as an executor would); the names of
        the threads they ran in."""
        ran: list[str] = []
        jobs, self.jobs = self.jobs, []
        for fn, args, future in jobs:
            outcome: dict[str, Any] = {}

            worker = threading.Thread(target=_run_job, args=(fn, args, outcome), name="fake-executor")
            worker.start()
            worker.join(10)
            ran.append(outcome["thread"])
            if "error" in outcome:
                future.set_exception(outcome["error"])
            else:
                future.set_result(outcome.get("result"))
        self.run_ready()
        return ran


def _run_job(fn: Callable[..., Any], args: tuple[Any, ...], outcome: dict[str, Any]) -> None:
    outcome["thread"] = threading.current_thread().name
    try:
        outcome["result"] = fn(*args)
    except Exception as exc:
        outcome["error"] = exc


@dataclass
class FakeTransport:
    """A socket's transport that records what the edge asks of it."""

    protocol: asyncio.Protocol | None = None
    peer: tuple[str, int] = ("10.0.0.1", 50000)
    high_water: int | None = None   # call protocol.pause_writing() once more than this was written
    journal: list[tuple[str, str]] | None = None   # (name, call) shared by transports: the order across them
    name: str = "?"
    calls: list[tuple[str, Any]] = field(default_factory=list)
    written: bytearray = field(default_factory=bytearray)
    closing: bool = False
    reading: bool = True
    queued: int = 0   # what get_write_buffer_size says: bytes a real transport would hold, unsent
    kinds: list[str] = field(default_factory=list)   # the type of every buffer handed to write/writelines

    def _call(self, call: str, arg: Any = None) -> None:
        self.calls.append((call, arg))
        if self.journal is not None:
            self.journal.append((self.name, call))

    def write(self, data: bytes | memoryview) -> None:
        self._call("write", len(data))
        self.kinds.append(type(data).__name__)
        self._wrote(bytes(data))

    def get_write_buffer_size(self) -> int:
        return self.queued

    def writelines(self, parts: Any) -> None:
        self.kinds.extend(type(p).__name__ for p in parts)
        parts = [bytes(p) for p in parts]
        self._call("writelines", len(parts))
        self._wrote(b"".join(parts))

    def _wrote(self, data: bytes) -> None:
        before = len(self.written)
        self.written += data
        if self.high_water is not None and before <= self.high_water < len(self.written):
            assert self.protocol is not None
            self.protocol.pause_writing()   # at once, from inside write: as asyncio's transports do

    def pause_reading(self) -> None:
        self._call("pause_reading")
        self.reading = False

    def resume_reading(self) -> None:
        self._call("resume_reading")
        self.reading = True

    def close(self) -> None:
        self._call("close")
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.peer}.get(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._call("set_write_buffer_limits", high)

    def reads(self) -> list[str]:
        """The pause/resume calls, in order."""
        return [name for name, _ in self.calls if name in ("pause_reading", "resume_reading")]

    def take(self) -> bytes:
        """What was written since the last take."""
        data, self.written = bytes(self.written), bytearray()
        return data
