"""What kqp buffers per connection at most, as a function of the config: the bound the README states
("Bounded memory"; the buffers one by one in proxy/README.md, "Memory bound") and the RSS tests
measure against.

Each direction of a connection holds the frame reader's buffers (at most one incomplete frame, its
size prefix checked before a byte of the body is kept, plus what the last read brought beyond it)
and the write buffer towards the other side (the high-water mark plus what one event may write past
it, since reading stops after the event that crossed it). A read is at most `READ_CHUNK_BYTES`, so
a direction holds at most `WRITE_HIGH_WATER + 2 x (max_frame_bytes + READ_CHUNK_BYTES)`. The
in-flight records are counted on top, by their number.
"""

from __future__ import annotations

from dataclasses import dataclass

from .edge import WRITE_HIGH_WATER

__all__ = ["IN_FLIGHT_RECORD_BYTES", "READ_CHUNK_BYTES", "ConnectionBound", "connection_bound"]

READ_CHUNK_BYTES = 256 * 1024
IN_FLIGHT_RECORD_BYTES = 512     # a Flight with its plan, principal and throttle, generously


@dataclass(frozen=True, slots=True)
class ConnectionBound:
    per_direction: int      # frame reader + write buffer of one direction
    in_flight: int          # the in-flight records, at the count given

    @property
    def total(self) -> int:
        return 2 * self.per_direction + self.in_flight


def connection_bound(max_frame_bytes: int, in_flight_requests: int = 0) -> ConnectionBound:
    """Bytes one connection may buffer in kqp with `in_flight_requests` requests awaiting responses."""
    per_direction = WRITE_HIGH_WATER + 2 * (max_frame_bytes + READ_CHUNK_BYTES)
    return ConnectionBound(per_direction, in_flight_requests * IN_FLIGHT_RECORD_BYTES)
