"""Responses owed to one client, in request order, some of them held back for a throttle.

Kafka answers the requests of a connection in order. A response held for an old client's throttle
(a version before KIP-219) therefore holds back every response behind it, even ones that are ready.
A response goes out as parts (`transport.writelines`), so a throttle patch can send a small
patched head and the untouched rest of a large Fetch response without copying it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

Parts = tuple[bytes | memoryview, ...]


class Outbox:
    __slots__ = ("_queue", "_write")

    def __init__(self, write: Callable[[Parts], None]) -> None:
        self._write = write
        self._queue: deque[tuple[float | None, Parts]] = deque()   # (release time or None, parts)

    def send(self, parts: Parts) -> None:
        """Write now, unless an earlier response is held: then queue behind it."""
        if self._queue:
            self._queue.append((None, parts))
        else:
            self._write(parts)

    def hold(self, parts: Parts, until: float) -> None:
        self._queue.append((until, parts))

    def release(self, now: float) -> None:
        """Write every response whose turn has come: those held until `now`, and any behind them."""
        queue = self._queue
        while queue and (queue[0][0] is None or queue[0][0] <= now):
            self._write(queue.popleft()[1])

    def __len__(self) -> int:
        return len(self._queue)
