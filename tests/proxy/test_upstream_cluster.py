"""Where kqp's listeners send their connections (`UpstreamCluster.upstreams_for`), as pure code."""

from __future__ import annotations

from kqp.config.model import HostPort, UpstreamConfig
from kqp.protocol.addresses import BrokerAddress
from kqp.proxy.runtime.cluster import UpstreamCluster

SEED = HostPort("127.0.0.1", 9000)


def cluster() -> UpstreamCluster:
    return UpstreamCluster(UpstreamConfig((SEED,), 10_000, 30_000), 1 << 20, clock=lambda: 0.0)


def test_before_any_metadata_bootstrap_goes_to_the_configured_servers() -> None:
    assert cluster().upstreams_for(None) == [SEED]


def test_bootstrap_offers_every_broker_starting_from_the_next_in_turn() -> None:
    c = cluster()
    c.learn([BrokerAddress(n, "127.0.0.1", 9000 + n) for n in (1, 2, 3)])
    orders = [c.upstreams_for(None) for _ in range(3)]
    # Each connection may fall back on every broker (one that is down is passed over)...
    assert all(sorted(order, key=lambda hp: hp.port) == [HostPort("127.0.0.1", 9000 + n) for n in (1, 2, 3)]
               for order in orders)
    # ...and successive connections start on successive brokers, spreading the load.
    assert [order[0].port for order in orders] == [9001, 9002, 9003]


def test_a_broker_listener_goes_to_its_broker_only() -> None:
    c = cluster()
    c.learn([BrokerAddress(1, "127.0.0.1", 9001), BrokerAddress(2, "127.0.0.1", 9002)])
    assert c.upstreams_for(2) == [HostPort("127.0.0.1", 9002)]
    assert c.upstreams_for(7) == []
