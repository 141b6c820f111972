"""A sensor's line: when its key's latest check says it is back within its quota (`ThrottleLine`).

The connection core gates a throttled connection's next Produce or Fetch on the lines of its
throttle's violations (proxy/connection/throttling.py), so what matters here is that a line is
shared by reference and moved by every check of the key, whichever connection makes it.

Kafka's numbers: windows of 1 s x 11 and T = 1000 B/s, so a fresh sensor measures over
(11 - 1) x 1 s = 10 s plus the elapsed part of the current window, and with S bytes recorded the
throttle is X = (S / W - T) / T x W = (S - T x W) / T: the line is now + X.
"""

from __future__ import annotations

import pytest
from helpers.pool_config import issue_pool

from kqp.config import quota_settings_from
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import EntitySpec, Principal, QuotaSettings, QuotaType
from kqp.quotas.sensor import QuotaSensor

P, OTHER = Principal("ANONYMOUS", "job"), Principal("ANONYMOUS", "other")
T = 1000.0


def manager(**quotas: float) -> QuotaManager:
    return QuotaManager(QuotaSettings(1.0, 11, {EntitySpec(None, "job"): quotas}), 0.0)


def test_every_check_moves_the_line_to_now_plus_its_throttle() -> None:
    s = QuotaSensor(T, 1.0, 11, 0.0)
    # 5000 B at t=0: 5000 / 10 = 500 B/s, within: the line is now.
    assert s.charge(5000, 0.0) == 0 and s.line.until == 0.0
    # +7000 B at t=0: S = 12 000 over W = 10 s: X = (12 000 - 10 000) / 1000 = 2 s, line 2.0.
    assert s.charge(7000, 0.0) == pytest.approx(2.0) and s.line.until == pytest.approx(2.0)
    # A check without a recording at t=0.5: W = 10.5, X = (12 000 - 10 500) / 1000 = 1.5 s: still 2.0.
    assert s.throttle(0.5) == pytest.approx(1.5) and s.line.until == pytest.approx(2.0)
    # At t=1.5 Kafka's window counts one full window and assumes nine more: W = 1.5 + 9 = 10.5, so
    # X = 1.5 s and the line moves to 3.0: it is the latest check's, whatever moved it.
    assert s.throttle(1.5) == pytest.approx(1.5) and s.line.until == pytest.approx(3.0)
    # At t=11 the sample (last event at t=0) is a span old and purged: within, the line is now.
    assert s.throttle(11.0) == 0 and s.line.until == 11.0


def test_a_violation_carries_its_sensors_line_and_sees_later_charges_by_reference() -> None:
    m = manager(producer_byte_rate=T)
    # Connection a: 12 000 B at t=0, X = 2 s: its line says 2.0.
    [a] = m.record_produce(P, 12_000, 1, 1, 0.0)
    assert a.throttle_seconds == pytest.approx(2.0) and a.line is not None and a.line.until == pytest.approx(2.0)
    # Connection b of the same key: 1000 B at t=0.5. S = 13 000 over W = 10.5 s:
    # X = (13 000 - 10 500) / 1000 = 2.5 s, line 3.0 = a's 2.0 + b's own cost, 1000 / 1000 s.
    [b] = m.record_produce(P, 1000, 1, 1, 0.5)
    assert b.line is a.line and a.line.until == pytest.approx(3.0)
    # Another key has a line of its own; equality of violations ignores lines.
    m.record_produce(OTHER, 1, 1, 1, 0.5)
    assert a.line.until == pytest.approx(3.0)


def test_only_the_rate_quotas_of_produce_and_fetch_carry_lines() -> None:
    m = manager(producer_byte_rate=T, consumer_byte_rate=T, request_rate=1)
    assert m.record_fetch(P, 12_000, 1, 1, 0.0)[0].line is not None
    # request_rate 1/s: 11 requests read as 11 / 10 = 1.1/s, throttled; a request quota has no line
    # (KIP-124 caps it at one window, and the gate would hold heartbeats behind a Produce's key).
    for _ in range(10):
        m.record_request(P, 0.0, 0.0)
    [v] = m.record_request(P, 0.0, 0.0)
    assert v.quota_type == QuotaType.REQUEST_RATE and v.line is None


def test_a_refund_moves_the_line_back_by_what_it_refunds() -> None:
    m = manager(consumer_byte_rate=T)
    # A Fetch response of 12 000 B at t=0: X = 2 s, line 2.0. Answered empty (fetch_throttle: empty):
    # its bytes are taken back, S = 0 and the key is within: the line is back at now.
    [v] = m.record_fetch(P, 12_000, 1, 1, 0.0)
    m.unrecord_fetch(P, 12_000, 1, 1, 0.0)
    assert v.line is not None and v.line.until == 0.0
    # 13 000 B then 1000 refunded: S = 12 000, X = 2 s: line 3 - 1 = 2.0, as a fresh check says.
    [v] = m.record_fetch(P, 13_000, 1, 1, 0.0)
    assert v.line.until == pytest.approx(3.0)
    m.unrecord_fetch(P, 1000, 1, 1, 0.0)
    assert v.line.until == pytest.approx(2.0)
    assert m.record_fetch(P, 0, 0, 0, 0.0)[0].throttle_seconds == pytest.approx(2.0)


def test_a_pool_members_violation_carries_the_members_line() -> None:
    # The issue's pool: producer_byte_rate B = 300 kB/s, windows 0.2 s x 11; job-a-1 alone gets all
    # of B. 700 000 B at t=0 over W = 2.0 s: X = (700 000 - 600 000) / 300 000 = 1/3 s.
    m = QuotaManager(quota_settings_from(issue_pool()), 0.0)
    [v] = m.record_produce(Principal("ANONYMOUS", "job-a-1"), 700_000, 1, 1, 0.0)
    member = next(iter(m.pools.ledgers.values())).members[v.key]
    assert v.pool == "ingest" and v.line is member.sensor.line
    assert v.line.until == pytest.approx(1 / 3)
