"""The fleet exchange without Redis: `kqp run --workers N`'s parent process is the store.

The supervising parent already exists and outlives its workers, so it serves the same exchange the
Redis script serves, from a `FleetStore` in memory, over a Unix socket in a private directory (mode
0700: only the same user can reach it). Nothing to install, nothing to configure: `--workers N`
simply holds one quota across its workers, as `quotas.scope: instance` promises for one kqp.

Wire format, both ways: a 4-byte big-endian length, then a JSON document (small: a few numbers per
active sensor per sync interval). The parent serves each worker's connection in a thread of its own
(the parent has no event loop: it waits for its children), under one lock around the store; its
clock is the wall clock, which the workers track as the fleet clock exactly as they track Redis's.
Adaptive pools' exchange (kqp.quotas.pools.adaptive_fleet) rides in the same message ("A"), served by an
`AdaptiveStore` beside the `FleetStore`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socketserver
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kqp.quotas.fleet.ledger import SensorTotals, SensorUsage, SyncReply, SyncRequest
from kqp.quotas.fleet.store import FleetStore
from kqp.quotas.pools.adaptive_fleet import (
    AdaptiveReply,
    AdaptiveRequest,
    AdaptiveStore,
    BudgetExchange,
    BudgetView,
    Proposal,
)

_LENGTH = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 << 20


def encode_request(request: SyncRequest) -> dict[str, Any]:
    return {"i": request.instance, "e": request.epoch, "w": request.window_ms, "k": request.keep_windows,
            "l": request.live_ms, "a": request.active_ms, "t": request.ttl_ms,
            "s": [[s.name, [[w, d] for w, d in s.deltas]] for s in request.sensors]}


def decode_request(data: dict[str, Any]) -> SyncRequest:
    sensors = tuple(SensorUsage(name, tuple((int(w), float(d)) for w, d in deltas)) for name, deltas in data["s"])
    return SyncRequest(data["i"], data["e"], int(data["w"]), int(data["k"]), int(data["l"]), int(data["a"]),
                       int(data["t"]), sensors)


def encode_reply(reply: SyncReply) -> dict[str, Any]:
    return {"e": reply.epoch, "n": reply.now, "p": reply.instances,
            "s": [[s.others_active, [[w, t] for w, t in s.windows.items()]] for s in reply.sensors]}


def decode_reply(data: dict[str, Any]) -> SyncReply:
    sensors = tuple(SensorTotals({int(w): float(t) for w, t in windows}, int(others)) for others, windows in data["s"])
    return SyncReply(data["e"], float(data["n"]), int(data["p"]), sensors)


def encode_adaptive(request: AdaptiveRequest) -> dict[str, Any]:
    return {"i": request.instance, "w": request.window_ms, "g": request.grace_windows, "k": request.keep_windows,
            "b": [[b.name, b.reports, None if b.proposal is None else
                   [b.proposal.after, b.proposal.applied, b.proposal.state]] for b in request.budgets]}


def decode_adaptive(data: dict[str, Any]) -> AdaptiveRequest:
    budgets = tuple(BudgetExchange(name, tuple((int(w), r) for w, r in reports),
                                   None if p is None else Proposal(int(p[0]), int(p[1]), p[2]))
                    for name, reports, p in data["b"])
    return AdaptiveRequest(data["i"], int(data["w"]), int(data["g"]), int(data["k"]), budgets)


def encode_adaptive_reply(reply: AdaptiveReply) -> dict[str, Any]:
    return {"n": reply.now, "b": [[v.applied, v.state, [[w, list(r)] for w, r in v.closed.items()]]
                                  for v in reply.budgets]}


def decode_adaptive_reply(data: dict[str, Any]) -> AdaptiveReply:
    return AdaptiveReply(float(data["n"]), tuple(BudgetView(int(applied), state, {int(w): tuple(r) for w, r in closed})
                                                 for applied, state, closed in data["b"]))


def frame(document: dict[str, Any]) -> bytes:
    body = json.dumps(document, separators=(",", ":")).encode()
    return _LENGTH.pack(len(body)) + body


# -- the parent's side ---------------------------------------------------------------------------------

class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        while True:
            head = self.rfile.read(_LENGTH.size)
            if len(head) < _LENGTH.size:
                return   # the worker went away
            (size,) = _LENGTH.unpack(head)
            if size > MAX_MESSAGE_BYTES:
                return
            document = json.loads(self.rfile.read(size))
            request = decode_request(document)
            with self.server.lock:
                now = time.time()
                answer = encode_reply(self.server.store.exchange(request, now))
                if "A" in document:   # adaptive pools: their one law per budget
                    answer["A"] = encode_adaptive_reply(self.server.adaptive.exchange(decode_adaptive(document["A"]),
                                                                                      now))
            self.wfile.write(frame(answer))


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str) -> None:
        self.store = FleetStore()
        self.adaptive = AdaptiveStore()
        self.lock = threading.Lock()
        super().__init__(path, _Handler)


class WorkersExchangeServer:
    """The parent's store and socket. Bind before forking (workers inherit nothing but the path), serve
    after forking (a thread must not exist at fork time), close when the workers are gone."""

    def __init__(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="kqp-workers-")   # mode 0700
        self.path = str(Path(self._directory) / "fleet.sock")
        self._server = _Server(self.path)
        self._thread: threading.Thread | None = None

    def serve(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.2,), name="kqp-fleet-store",
                                        daemon=True)
        self._thread.start()

    def close_in_worker(self) -> None:
        """In a forked worker: let go of the parent's listening socket."""
        self._server.socket.close()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(2)
        self._server.server_close()
        shutil.rmtree(self._directory, ignore_errors=True)


# -- a worker's side -----------------------------------------------------------------------------------

class WorkersExchange:
    """`FleetBackend` talking to the parent: one connection, opened again after any failure."""

    kind = "workers"

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = "the workers' parent process"
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def exchange(self, request: SyncRequest, deadline: float, adaptive: AdaptiveRequest | None = None
                       ) -> tuple[SyncReply, AdaptiveReply | BaseException | None]:
        """The usage exchange, and the adaptive pools' when asked, in one message each way."""
        document = encode_request(request)
        if adaptive is not None:
            document["A"] = encode_adaptive(adaptive)
        answer = await self._round_trip(document, deadline)
        return decode_reply(answer), None if adaptive is None else decode_adaptive_reply(answer["A"])

    async def _round_trip(self, document: dict[str, Any], deadline: float) -> dict[str, Any]:
        try:
            async with asyncio.timeout_at(deadline):
                if self._streams is None:
                    self._streams = await asyncio.open_unix_connection(self.path)
                reader, writer = self._streams
                writer.write(frame(document))
                await writer.drain()
                (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
                return json.loads(await reader.readexactly(size))  # type: ignore[no-any-return]
        except BaseException:
            # Whatever went wrong (a timeout's cancellation included), the stream may hold half a
            # message: start over on a new connection next time.
            self._drop()
            raise

    def _drop(self) -> None:
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()

    async def close(self) -> None:
        writer = self._streams[1] if self._streams is not None else None
        self._drop()
        if writer is not None:
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()
