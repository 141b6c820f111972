"""What a muted client's socket holds, seen without reading it: the back-off probe's and the
give-up rule's eyes (`kqp.proxy.connection.backoff`, `kqp.proxy.connection.giving_up`).

A muted connection is not read, so what the client sends waits in the kernel. Two questions are
answered there, only for a throttled connection's timer, never on the forwarding path: how many
bytes wait unread (`ioctl(FIONREAD)`; on TLS, the encrypted bytes), and whether the client closed
or reset the connection (`poll` with `POLLRDHUP`, which Linux sets once the peer's FIN is in even
behind queued data, and `POLLHUP`/`POLLERR` after a reset). Either answer is None or False where
the transport has no socket to ask (a test's fake one) or the platform cannot tell.
"""

from __future__ import annotations

import array
import fcntl
import select
import termios
from typing import Any

__all__ = ["peer_gone", "unread_bytes"]

_GONE = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


def _fileno(transport: Any) -> int | None:
    sock = None if transport is None else transport.get_extra_info("socket")
    if sock is None:
        return None
    try:
        fd = sock.fileno()
    except (OSError, ValueError):
        return None
    return fd if fd >= 0 else None


def unread_bytes(transport: Any) -> int | None:
    """Bytes the client sent that wait unread in the kernel, or None when that cannot be known."""
    fd = _fileno(transport)
    if fd is None:
        return None
    count = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, count, True)
    except OSError:
        return None
    return count[0]


def peer_gone(transport: Any) -> bool:
    """Whether the client has closed (FIN) or reset its end, whatever it left unread before that."""
    fd = _fileno(transport)
    if fd is None:
        return False
    poller = select.poll()
    poller.register(fd, _GONE)
    try:
        return any(events & _GONE for _, events in poller.poll(0))
    except OSError:
        return False
