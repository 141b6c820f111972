"""The fault tap's own faults, against the scripted fake broker of `test_wire_tap`."""

from __future__ import annotations

import socket

from .fault_tap import FaultTap
from .net import accepts, read_until_eof, split_host_port
from .test_wire_tap import echo_id, fake_broker, metadata, read_frame


def test_down_resets_open_connections_refuses_new_ones_and_up_serves_again() -> None:
    # An open relayed connection at down() is what made it hang on Python 3.12+: the server's
    # wait_closed() waits for it, so down() must reset it first (or raise TimeoutError here).
    with fake_broker(echo_id) as target, FaultTap("f") as tap:
        hop = split_host_port(tap.relay(target))
        with socket.create_connection(hop, timeout=5) as sock:
            sock.sendall(metadata(1))
            read_frame(sock)
            tap.down()
            _, closed = read_until_eof(sock, 5)
            assert closed
        assert not accepts(*hop)
        assert tap.cut_count == 1
        tap.up()
        with socket.create_connection(hop, timeout=5) as sock:
            sock.sendall(metadata(2))
            assert read_frame(sock)[:4] == (2).to_bytes(4, "big")
