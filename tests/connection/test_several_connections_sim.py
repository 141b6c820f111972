"""Several connections of one key, simulated (helpers.connections_sim): the quota manager and each
connection's real throttling room on an injected clock, clients flat out.

The mechanism. KIP-219 mutes the connection that sent a request until the key would be back within
its quota. Under Kafka's sampled rate (`algorithm: sampled`), X = (S - Q x W) / Q after the request's
S bytes over Kafka's window W: with n connections each mute ends while the others' requests admitted
meanwhile, about (n - 1) x b, hold the key over its line, and the windowed sum forgets them as samples
expire, so the rate runs about Q x (1 + (n - 1) x b / (Q x W)): 7.8 % per extra connection with
Q = 100 kB/s, windows 0.2 s x 11 and b = 16 KiB (simulated: 6.2 %). That is the broker's own
behaviour. Under `steady`, the config file's default, every request is told the key's whole debt as
it is read, whichever connection ran it up, and the debt is never forgotten: n connections get what
one gets, and no request waits longer than its client was told.
"""

from __future__ import annotations

import pytest
from helpers.connections_sim import ConnectionsRun, simulate
from helpers.quota_analysis import cumulative_slope

Q = 100_000.0
SECONDS = 60.0


def ratio(run: ConnectionsRun, window_size: float = 0.2, window_count: int = 11, seconds: float = SECONDS) -> float:
    """The rate the upstream got, in quotas, after the first burst and its echo (two spans and 1 s)."""
    return cumulative_slope(run.events, 2 * window_size * window_count + 1, seconds) / Q


@pytest.mark.parametrize("request_bytes", [4096, 16384])
def test_under_kafkas_sampled_rate_each_connection_passes_one_request_past_the_line(request_bytes: int) -> None:
    """Kafka's behaviour: about (n - 1) x b / (Q x W) over the quota."""
    one = ratio(simulate(1, Q, SECONDS, request_bytes=request_bytes, algorithm="sampled"))
    assert one == pytest.approx(1.0, abs=0.005)
    per_extra = request_bytes / (Q * 2.1)   # b / (Q x W): 0.020 for 4 KiB, 0.078 for 16 KiB
    for n in (2, 3, 5):
        excess = ratio(simulate(n, Q, SECONDS, request_bytes=request_bytes, algorithm="sampled")) / one - 1
        assert 0.6 * (n - 1) * per_extra < excess < 1.1 * (n - 1) * per_extra, (n, excess)


@pytest.mark.parametrize("request_bytes", [2048, 16384, 65536])
@pytest.mark.parametrize("connections", [2, 3, 5])
@pytest.mark.parametrize("backs_off", [True, False])
def test_under_steady_n_connections_get_what_one_gets(request_bytes: int, connections: int, backs_off: bool) -> None:
    """Whether the client waits out the throttle it is told or sends at once (and waits in the muted
    socket), each request read is told the key's debt: simulated, 1.000 Q for every n and b here."""
    one = ratio(simulate(1, Q, SECONDS, request_bytes=request_bytes, backs_off=backs_off))
    several = ratio(simulate(connections, Q, SECONDS, request_bytes=request_bytes, backs_off=backs_off))
    assert one == pytest.approx(1.0, abs=0.005) and several == pytest.approx(one, abs=0.005)


@pytest.mark.parametrize(("window_size", "window_count", "latency"),
                         [(1.0, 11, 0.002), (0.1, 11, 0.002), (0.2, 30, 0.002), (0.2, 11, 0.02)])
def test_under_steady_it_holds_for_other_windows_and_upstream_latencies(window_size: float, window_count: int,
                                                                        latency: float) -> None:
    """Under the sampled rate the excess grows as the window shrinks (b / (Q x W)); the debt knows no
    window. 8 KiB requests, three connections, judged over 15 spans."""
    seconds = max(SECONDS, 15 * window_size * window_count)
    kw = {"request_bytes": 8192, "window_size": window_size, "window_count": window_count, "latency": latency}
    steady = ratio(simulate(3, Q, seconds, **kw), window_size, window_count, seconds)
    sampled = ratio(simulate(3, Q, seconds, algorithm="sampled", **kw), window_size, window_count, seconds)
    assert steady == pytest.approx(1.0, abs=0.01) and sampled > steady + 0.01


def test_uneven_requests_and_the_turns_are_fair() -> None:
    """Request sizes uniform in 8 KiB x (1 +- 0.9): three connections at the quota, and each gets its
    turn: at most 2 % apart."""
    for seed in (1, 2, 3):
        run = simulate(3, Q, SECONDS, request_bytes=8192, jitter=0.9, seed=seed)
        assert ratio(run) == pytest.approx(1.0, abs=0.01)
        assert max(run.per_connection) <= 1.02 * min(run.per_connection)


def test_no_request_waits_longer_than_its_client_was_told() -> None:
    """KIP-219 as written: a client that waits out the throttle it is told finds its connection read
    again; nothing holds a request back untold, whatever its siblings did."""
    for algorithm in ("steady", "sampled"):
        run = simulate(3, Q, SECONDS, request_bytes=8192, algorithm=algorithm)
        assert max(run.waits) <= 0.0, algorithm
