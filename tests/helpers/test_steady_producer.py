"""The steady producer stops its thread even when it never got going."""

from __future__ import annotations

import pytest

from .net import LOOPBACK, free_port
from .steady_producer import SteadyProducer


@pytest.mark.e2e
def test_a_producer_that_never_progresses_stops_its_thread_on_entering(mock_cluster) -> None:
    # Nothing listens on the bootstrap: each message times out after 0.5 s, so entering fails;
    # `__exit__` never runs then, and the thread would go on producing for the rest of the session.
    steady = SteadyProducer(f"{LOOPBACK}:{free_port()}", mock_cluster.kind, topic_via=str(mock_cluster),
                            **{"message.timeout.ms": 500})
    with pytest.raises(AssertionError, match="the real client failed"):
        with steady:
            pass
    assert not steady._thread.is_alive()
