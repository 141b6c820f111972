"""What becomes of the requests a client leaves behind when it goes: a client that gives up.

A client whose request times out closes its connection. The requests it had pipelined behind a
throttle are then either read but not forwarded (they wait for the mute in the core's frame reader) or
not read at all (they wait in the muted socket). Forwarding them after the client left would write
records the client has already reported as failed, and a producer that retries would write them
twice. Kafka's clients never half-close, so a client's EOF is a client that is gone; and a broker
never reads what a closed channel still had queued (it reads one request at a time, the rest stays
in the socket and goes with it). kqp does the same. On the client's EOF, on a reset, and on a close
the edge sees while the connection is muted (`TimerFired.client_gone`, before anything more is
read), every request read but not yet forwarded is dropped, and the connection reads nothing more.
What was forwarded is unaffected: its response is still delivered if the socket takes it, and the
connection closes once nothing is owed (or at once on a reset), as before. Dropped requests are
logged and counted (`ProxyObserver.requests_dropped`, `kqp_requests_dropped_total`).
"""

from __future__ import annotations

import logging

from kqp.protocol.errors import ProtocolError
from kqp.protocol.frames import FrameReader

from .events import Parts
from .hooks import ProxyObserver

__all__ = ["drop_unforwarded", "truncated"]

log = logging.getLogger("kqp.connection")


def drop_unforwarded(requests: FrameReader, held: Parts | None, peer: str, observer: ProxyObserver, how: str) -> int:
    """Empty `requests` of what it holds (and count `held`, a request waiting for a topic lookup):
    they were read but not forwarded, and their client is gone (`how`). Returns the bytes left that
    were no whole request, when no whole request was dropped: a frame the client never finished,
    which its close makes a truncated frame (as it would be unthrottled), not a client giving up."""
    frames = 0 if held is None else 1
    nbytes = 0 if held is None else sum(map(len, held))
    try:
        while (frame := requests.next_frame()) is not None:
            frames += 1
            nbytes += len(frame)
    except ProtocolError:   # what follows is no frame: its bytes go with the rest
        pass
    rest = requests.discard()
    if not frames:
        return rest
    observer.requests_dropped(frames)
    log.info("client %s %s: dropped %d request(s) (%d bytes) it had sent but kqp had not forwarded",
             peer, how, frames, nbytes + rest)
    return 0


def truncated(received: int) -> str:
    """The close message for a frame the client began and never finished before it closed."""
    return f"truncated frame: the client closed the connection mid-frame ({received} bytes of it received)"
