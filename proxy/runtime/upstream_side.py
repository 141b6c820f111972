"""The upstream half of a connection pair: hands bytes and flow control to its client session."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kqp.proxy.connection.session import ClientSession


class UpstreamSide(asyncio.Protocol):
    __slots__ = ("session",)

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    def data_received(self, data: bytes) -> None:
        self.session.on_upstream_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.session.upstream_lost(exc)

    def pause_writing(self) -> None:          # the upstream reads slower than the client sends
        self.session.upstream_backpressure(True)

    def resume_writing(self) -> None:
        self.session.upstream_backpressure(False)
