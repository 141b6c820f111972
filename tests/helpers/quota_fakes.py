"""Fakes for testing kqp's proxy pieces without sockets or sleeps: a hand-cranked loop, transports.

uvicorn's way: the proxy takes its loop through a constructor (ProxyContext), so a test hands it a
loop whose clock moves only when told to and whose timers fire only when the test advances time.
`FakeTransport` records what a session writes and how it flow-controls, the two things a session's
correctness is judged by. `session_harness` builds a real `ClientSession` on a real context (real
config, quota manager and delay driver) with these fakes at its edges.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kqp.config.loader import parse_config
from kqp.protocol.apis import kqp_ranges
from kqp.proxy.connection.session import ClientSession
from kqp.proxy.runtime.cluster import UpstreamCluster
from kqp.proxy.runtime.context import ProxyContext
from kqp.proxy.runtime.delay import DelayDriver
from kqp.quotas.manager import QuotaManager

_SIZE = struct.Struct(">i")


class FakeTimer:
    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """`time()` and `call_at()` only; `advance(t)` runs due timers in deadline order, as asyncio does."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> FakeTimer:
        timer = FakeTimer(when, callback, args)
        self.timers.append(timer)
        return timer

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> FakeTimer:
        return self.call_at(self.now + delay, callback, *args)

    @property
    def pending(self) -> list[FakeTimer]:
        return sorted((t for t in self.timers if not t.cancelled), key=lambda t: t.when)

    def advance(self, to: float, *, fire_at: float | None = None) -> None:
        """Move the clock to `to`, firing every timer due by then (each with the clock at `fire_at`
        if given, to imitate a loop that wakes a little early or late)."""
        for _ in range(10_000):   # bounded: a timer that re-arms itself forever is a bug
            due = [t for t in self.pending if t.when <= to]
            if not due:
                break
            timer = due[0]
            self.timers.remove(timer)
            self.now = max(self.now, timer.when if fire_at is None else fire_at)
            timer.callback(*timer.args)
        else:
            raise AssertionError("timers kept re-arming at or before the target time")
        self.now = max(self.now, to)


@dataclass
class FakeTransport:
    written: list[bytes] = field(default_factory=list)
    paused: bool = False
    pauses: int = 0
    resumes: int = 0
    closed: bool = False

    def write(self, data: bytes | memoryview) -> None:
        assert not self.closed, "write after close"
        self.written.append(bytes(data))

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        self.write(b"".join(bytes(p) for p in parts))

    def pause_reading(self) -> None:
        self.paused, self.pauses = True, self.pauses + 1

    def resume_reading(self) -> None:
        self.paused, self.resumes = False, self.resumes + 1

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def frames(self) -> list[bytes]:
        """Everything written, cut into frames (size prefix removed)."""
        data = b"".join(self.written)
        out: list[bytes] = []
        while len(data) >= 4:
            (size,) = _SIZE.unpack_from(data)
            out.append(data[4:4 + size])
            data = data[4 + size:]
        return out

    def correlation_ids(self, *, request: bool = False) -> list[int]:
        """Correlation ids of the written frames: responses carry it first, requests after 4 bytes."""
        offset = 4 if request else 0
        return [_SIZE.unpack_from(f, offset)[0] for f in self.frames()]


class FakeListeners:
    advertised_host = "127.0.0.1"

    def map_address(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return self.advertised_host, 19100 + node_id


@dataclass
class SessionHarness:
    loop: FakeLoop
    ctx: ProxyContext
    session: ClientSession
    client: FakeTransport
    upstream: FakeTransport


def session_harness(quotas: dict[str, Any] | None = None, **config: Any) -> SessionHarness:
    """A `ClientSession` already connected to a fake client and a fake upstream."""
    loop = FakeLoop()
    cfg = parse_config({"upstream": {"bootstrap_servers": "127.0.0.1:9092"}, "quotas": quotas or {}, **config})
    cluster = UpstreamCluster(cfg.upstream, cfg.max_frame_bytes)
    cluster.api_ranges = dict(kqp_ranges())
    ctx = ProxyContext(loop=loop, config=cfg, quotas=QuotaManager(cfg.quotas, loop.time()),  # type: ignore[arg-type]
                       delay=DelayDriver(loop), cluster=cluster, listeners=FakeListeners())  # type: ignore[arg-type]
    session = ClientSession(ctx, "bootstrap", None)
    client, upstream = FakeTransport(), FakeTransport()
    # What connection_made and a completed upstream connect leave behind, without the connect task.
    session.client = client  # type: ignore[assignment]
    session.upstream = upstream  # type: ignore[assignment]
    ctx.sessions.add(session)
    return SessionHarness(loop, ctx, session, client, upstream)
