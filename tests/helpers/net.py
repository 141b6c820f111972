"""Loopback socket helpers shared by the end-to-end tests.

Every test that opens sockets uses 127.0.0.1 and ports the kernel hands out, so two xdist workers
never collide on a fixed number, and every wait here is bounded by a deadline rather than a count
of sleeps, so a hung peer fails the test instead of hanging the run.
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free a moment ago (bind to 0, read it back, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def split_host_port(address: str) -> tuple[str, int]:
    """`"h:p"` (or `"[::1]:p"`) to `(host, port)`."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def split_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """`"h:p,h:p"` to a list of `(host, port)`."""
    return [split_host_port(part.strip()) for part in bootstrap.split(",") if part.strip()]


def accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a TCP connect to host:port succeeds now."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port(host: str, port: int, timeout: float = 15.0, interval: float = 0.05) -> None:
    """Block until host:port accepts connections; raise TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if accepts(host, port):
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{host}:{port} did not accept connections within {timeout:.1f}s")
        time.sleep(interval)


def read_until_eof(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    """Read everything the peer sends until it closes, for at most `timeout` seconds.

    Returns the bytes read and whether EOF (or a reset, which is also a close) was seen in time.
    """
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b"".join(chunks), False
        sock.settimeout(remaining)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return b"".join(chunks), False
        except ConnectionResetError:
            return b"".join(chunks), True
        if not data:
            return b"".join(chunks), True
        chunks.append(data)


def unread_by_peer(sock: socket.socket) -> int | None:
    """Bytes `sock` sent that its IPv4 loopback peer has not read yet: the receive queue of the
    peer's socket as Linux shows it in /proc/net/tcp (a muted kqp leaves requests there). None
    when that cannot be known (another platform, or the connection is gone)."""
    def hex_address(address: tuple[str, int]) -> str:   # as /proc/net/tcp prints it (little-endian host)
        return f"{socket.inet_aton(address[0])[::-1].hex().upper()}:{address[1]:04X}"

    try:
        peer, mine = hex_address(sock.getpeername()), hex_address(sock.getsockname())
        with open("/proc/net/tcp", encoding="ascii") as table:
            for line in table:
                fields = line.split()   # sl local_address rem_address st tx_queue:rx_queue ...
                if fields[1:3] == [peer, mine]:
                    return int(fields[4].split(":")[1], 16)
    except OSError:
        return None
    return None


def kqp_ports(proxy: Any) -> set[int]:
    """The ports a running kqp (`KqpProcess`) listens on for clients: bootstrap and every broker's."""
    ports = {int(proxy.bootstrap.rsplit(":", 1)[1])}
    ports.update(int(m) for m in re.findall(r"broker \d+ listener on [^:\s]+:(\d+)", proxy.logs()))
    return ports


def my_connections(remote_ports: set[int]) -> set[tuple[int, int]]:
    """(local port, remote port) of this process's established TCP sockets to those ports."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for line in Path("/proc/self/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
        remote_port = int(remote.split(":")[1], 16)
        if state == "01" and inode in inodes and remote_port in remote_ports:
            found.add((int(local.split(":")[1], 16), remote_port))
    return found
