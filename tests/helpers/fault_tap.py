"""Faults between kqp and its upstream, on demand: the wire tap with a hand on every connection.

kqp must never answer a Produce itself, whatever happens to its upstream connections; the tests
that prove it need the faults a real network and a rolling broker produce, at moments they pick.
`FaultTap` is the one wire tap (`wire_tap.WireTap`: frames recorded, broker addresses rewritten to
the tap's hops so kqp's every upstream connection passes it) plus:

* `cut_all()`: reset every relayed connection now (RST both ways, as a dying node or a NAT table
  flush does);
* `cut_mid_request(api_key, count)`: the next `count` requests of that API reach the upstream only
  half written, then both sides are reset: the upstream never answers them;
* `cut_mid_response(api_key, count)`: the next `count` responses of that API reach kqp only half
  written, then both sides are reset: the upstream did the work (wrote the batch) and the client
  never hears of it, so its retry is what idempotence is for;
* `stall()` / `unstall()`: stop reading what kqp sends (an upstream that hangs): kqp's writes pile
  up in its own buffers, which is what its backpressure must bound;
* `down()` / `up()`: close every connection and the listening ports (connections refused, as when
  the broker is gone), then listen again on the same ports.

Every method is called from the test's thread and waits (bounded) until the tap's loop has done it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from kqp.protocol.headers import response_correlation_id

from .net import split_host_port
from .wire_tap import Pair, WireTap

__all__ = ["FaultTap"]

STEP_TIMEOUT = 10.0


class FaultTap(WireTap):
    """A `WireTap` whose relayed connections fail on demand (the module docstring lists how)."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.stalled = False
        self.cuts: dict[int, int] = {}   # api key -> requests still to cut
        self.response_cuts: dict[int, int] = {}   # api key -> responses still to cut
        self.cut_count = 0               # connections cut so far, by any fault

    # -- faults ------------------------------------------------------------------------------------
    def cut_all(self) -> int:
        """Reset every open connection; how many transports were reset."""
        return self._on_loop(self._cut())

    async def _cut(self) -> int:
        live = list(self.live)
        for transport in live:
            transport.abort()  # type: ignore[attr-defined]
        self.cut_count += len(live) // 2
        return len(live)

    def cut_mid_request(self, api_key: int, count: int = 1) -> None:
        self._on_loop(self._arm(self.cuts, api_key, count))

    def cut_mid_response(self, api_key: int, count: int = 1) -> None:
        self._on_loop(self._arm(self.response_cuts, api_key, count))

    @staticmethod
    async def _arm(cuts: dict[int, int], api_key: int, count: int) -> None:
        cuts[api_key] = cuts.get(api_key, 0) + count

    def stall(self) -> None:
        self._on_loop(self._stalled(True))

    def unstall(self) -> None:
        self._on_loop(self._stalled(False))

    async def _stalled(self, stalled: bool) -> None:
        self.stalled = stalled
        for transport in self._client_sides():
            if stalled:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def down(self) -> None:
        """Refuse connections and reset every open one, until `up()`."""
        async def close() -> None:
            servers, self._servers = self._servers, []
            for server in servers:
                server.close()
            # Reset the live connections before waiting: from Python 3.12 wait_closed() also waits
            # for every connection the server accepted, so waiting first would never return.
            await self._cut()
            for server in servers:
                await server.wait_closed()

        self._on_loop(close())

    def up(self) -> None:
        """Listen again on every hop's port (SO_REUSEADDR: at once)."""
        async def reopen() -> None:
            for target, hop in self.hops.items():
                await self.serve(target, split_host_port(hop)[1])

        self._on_loop(reopen())

    # -- the tap's hook, on its loop ---------------------------------------------------------------
    def on_request(self, pair: Pair, frame: memoryview) -> memoryview:
        frame = super().on_request(pair, frame)
        client = pair.transports.get("client")
        if self.stalled and client is not None:
            client.pause_reading()   # the relay's own flow control may have resumed it
        if len(frame) < 8:
            return frame
        return self._cut_if_armed(self.cuts, int.from_bytes(frame[4:6], "big", signed=True), pair, frame)

    def on_response(self, pair: Pair, frame: memoryview) -> bytes | memoryview:
        request = pair.pending.get(response_correlation_id(frame)) if len(frame) >= 8 else None
        out = super().on_response(pair, frame)
        if request is None:
            return out
        return self._cut_if_armed(self.response_cuts, request.api_key, pair, out)

    def _cut_if_armed(self, cuts: dict[int, int], api_key: int, pair: Pair, frame: Any) -> Any:
        """Half of `frame` goes, then the pair is reset, when a cut is armed for `api_key`."""
        if cuts.get(api_key, 0) <= 0:
            return frame
        cuts[api_key] -= 1
        self.cut_count += 1
        asyncio.get_running_loop().call_soon(self._reset, pair)
        return frame[:len(frame) // 2]

    @staticmethod
    def _reset(pair: Pair) -> None:
        for transport in pair.transports.values():
            transport.abort()

    def _client_sides(self) -> list[Any]:
        # The tap's accepted sockets are the ones kqp writes to.
        return [t for t in self.live if self._accepted(t)]

    def _accepted(self, transport: Any) -> bool:
        local = transport.get_extra_info("sockname")
        return local is not None and f"{local[0]}:{local[1]}" in self.hops.values()

    def _on_loop(self, step: Coroutine[Any, Any, Any]) -> Any:
        assert self._loop is not None, "start() the tap first"
        return asyncio.run_coroutine_threadsafe(step, self._loop).result(STEP_TIMEOUT)
