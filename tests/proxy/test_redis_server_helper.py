"""The tests' redis-server launcher when another worker's server takes its port first.

Ports are chosen free and bound a moment later; under pytest-xdist another worker's server may bind
one in between. The launcher must not take that server for its own (a cluster node that turned out
to be someone's standalone server failed `redis-cli --cluster create` in a full run).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.redis_server import PortTaken, RedisServer, needs_redis

pytestmark = needs_redis


def test_a_server_given_a_taken_port_says_so(tmp_path: Path) -> None:
    with_port = RedisServer(tmp_path / "first.log").start()
    try:
        with pytest.raises(PortTaken, match="Address already in use"):
            RedisServer(tmp_path / "second.log", port=with_port.port).start()
    finally:
        with_port.stop()


def test_a_server_whose_chosen_port_was_taken_moves_to_another(tmp_path: Path) -> None:
    mine = RedisServer(tmp_path / "mine.log")
    squatter = RedisServer(tmp_path / "squatter.log", port=mine.port).start()   # took it first
    try:
        chosen = mine.port
        mine.start()
        assert mine.port != chosen and mine.proc is not None and mine.proc.poll() is None
    finally:
        mine.stop()
        squatter.stop()
