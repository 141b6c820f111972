"""A large response passed on to the client as it arrives, never held whole (Fetch).

A Fetch response can be tens of MB. Held until its last byte, kqp wrote it out of memory long after
its start had left the cache; passed on as each segment of it is received (`protocol/receive.py`),
it costs what a byte relay pays. A response streams only when all kqp needs of it is in its start
(`Replier.streams`): its header, its length (the consumer byte charge: Kafka's FetchResponse size),
its `throttle_time_ms` (the throttle is decided on the start and written into it), and no quota
needs its record counts or topic sizes. The one part at its end, Fetch v16+'s `NodeEndpoints`, is
found by a stream walk (`MessageWalker.tags_stream`) that follows the structure as bytes arrive,
skipping record data by its length (or counting its batches for the metrics, `StreamPlan.counts`);
the tag section is held back until it is whole and rewritten at its own size (`Awaiting.kqps_tail`),
since the frame's length went out first.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from kqp.protocol.errors import ProtocolError
from kqp.protocol.frames import FrameDecoder
from kqp.protocol.headers import response_body_offset, response_correlation_id
from kqp.protocol.parts import SplitFrame, StreamFrame
from kqp.protocol.walker import Buffer

from .events import Parts
from .plans import Flight, StreamPlan

__all__ = ["RESPONSE_HEAD_BYTES", "STREAM_BYTES", "ResponseStream", "begin_stream"]

STREAM_BYTES = 512 * 1024   # a response at least this large streams (a smaller one is held, as before)
# How much of a response is read contiguously: its header (with tagged fields nobody sends today).
RESPONSE_HEAD_BYTES = 4096

#: The tag section of a streamed response (it ends the frame), made kqp's at the same size.
TailRewrite = Callable[[memoryview], Buffer]


def begin_stream(responses: FrameDecoder, flight: Flight, how: StreamPlan,
                 finish: TailRewrite) -> ResponseStream | None:
    """The large response whose start `responses` holds, taken from it as a stream (the rest of its
    bytes are the stream's to take); None, its start handed back, when it does not answer `flight`
    (`unawaited` says why once it is whole) or its start stops short of its throttle field."""
    size = responses.incomplete()
    start = responses.take_incomplete()
    head = memoryview(start[0]) if len(start[0]) >= RESPONSE_HEAD_BYTES else \
        memoryview(SplitFrame(start).copy(0, RESPONSE_HEAD_BYTES))
    stream = None
    if response_correlation_id(head) == flight.correlation_id:
        body_offset = response_body_offset(flight.api_key, flight.api_version, head)
        stream = ResponseStream.open(flight, start, size, how, body_offset, finish)
    if stream is None:
        for part in start:   # read whole after all
            responses.feed(part)
    return stream


class ResponseStream:
    """One response on its way: `first` goes out with the plan's reply, `take` passes on the rest."""

    __slots__ = ("_finish", "_frame", "_passed", "_rewrite", "_tail_at", "_walk", "body_offset", "counts", "drop",
                 "first", "flight", "left", "size")

    def __init__(self, flight: Flight, start: Parts, size: int, how: StreamPlan, body_offset: int,
                 finish: TailRewrite) -> None:
        self.flight, self.size, self.body_offset = flight, size, body_offset
        self.left = size - sum(map(len, start))   # bytes of the frame still to be read
        self.drop = False                          # a withheld response: the rest is read and dropped
        self.counts = how.counts
        self._rewrite, self._finish = how.rewrite_tail, finish
        self._tail_at: int | None = None
        self._frame: StreamFrame | None = None
        self._walk: Generator[None, None, int] | None = None
        self._passed = 0
        self.first: Parts = start
        if how.walk is not None:
            frame = self._frame = StreamFrame(start, size)
            self._walk = how.walk(frame, body_offset, how.counts)
            self._passed = self._walked()
            self.first = tuple(frame.views(0, self._passed))

    @classmethod
    def open(cls, flight: Flight, start: Parts, size: int, how: StreamPlan, body_offset: int,
             finish: TailRewrite) -> ResponseStream | None:
        """The stream of a response of `size` bytes whose `start` is in; None when that start does not
        reach past its throttle field (it is then read whole)."""
        stream = cls(flight, start, size, how, body_offset, finish)
        return stream if sum(map(len, stream.first)) >= body_offset + 4 else None

    def _walked(self) -> int:
        """Run the walk on what is in; how far the bytes are surely not the tag section."""
        frame = self._frame
        assert frame is not None and self._walk is not None
        if self._tail_at is None:
            try:
                next(self._walk)
            except StopIteration as done:
                self._tail_at = done.value
        # The walk may end before the bytes it skipped are in (the records of the last partition).
        return min(frame.waiting if self._tail_at is None else self._tail_at, frame.received)

    def take(self, data: Buffer) -> tuple[list[Buffer], Buffer]:
        """The next bytes read from the upstream: what goes to the client now, and the bytes after this
        response (the next frames)."""
        left = self.left
        if len(data) <= left:
            piece, rest = data, b""
        else:
            view = memoryview(data)
            piece, rest = view[:left], view[left:]
        self.left = left - len(piece)
        if self.drop or not piece:
            return [], rest
        frame = self._frame
        if frame is None:
            return [piece], rest
        frame.add(piece)
        upto = self._walked()
        out: list[Buffer] = list(frame.views(self._passed, upto)) if upto > self._passed else []
        self._passed = max(upto, self._passed)
        if not self.left:
            if self._tail_at is None:   # a walk over the whole frame ends, or raises BodyError
                raise ProtocolError("a streamed response ended inside its fields")
            if self._rewrite:
                out.append(self._finish(memoryview(frame.copy(self._tail_at, frame.total))))
            else:
                out += frame.views(self._tail_at, frame.total)
        return out, rest
