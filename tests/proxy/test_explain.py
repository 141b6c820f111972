"""`kqp explain`'s document and its text, without a kqp: a real quota manager driven with plain times,
connections as views, and the CLI's rendering of the document (issue 20).

Shared scope (cluster, `--workers`): the rate a throttle is computed on is the fleet's, so the
document gives both, this process's (`rate`) and the fleet's (`fleet_rate`). Two processes here each
charge 6000 B to one client id's 1000 B/s quota and exchange usage through a store: each sees its
own 6000 B over Kafka's window at t = 0.1 s, 0.1 + (11 - 1) = 10.1 s (594 B/s), and the fleet's
12 000 B over the same window (1188 B/s).
"""

from __future__ import annotations

import pytest

from kqp.config import quota_settings_from
from kqp.proxy.connection.views import ConnectionView
from kqp.proxy.observability.client_metrics import RecentThrottles
from kqp.proxy.observability.explain import Explainer
from kqp.proxy.tools.explain_cli import render
from kqp.quotas.fleet.ledger import FleetLedger
from kqp.quotas.fleet.store import FleetStore
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import Principal

P = Principal("alice", "job-1")
SECTION = {"entities": [{"client_id": "job-1", "producer_byte_rate": 1000}],
           "pools": [{"name": "ingest", "producer_byte_rate": 5000, "members": [{"user": "alice"}]}]}


def view(user: str = "alice", client_id: str = "job-1", honours: str = "no",
         why: str | None = "version") -> ConnectionView:
    return ConnectionView("10.0.0.7:5123", "broker-1", user, (client_id,), "unknown", "Produce v3", honours, why,
                          0.4, "open")


def shared_managers() -> list[QuotaManager]:
    store, managers = FleetStore(), []
    for name in ("a", "b"):
        managers.append(QuotaManager(quota_settings_from(SECTION), 0.0, FleetLedger(name, f"e-{name}", 1.0, 11, 1,
                                                                                    0.1)))
    for m in managers:
        m.record_produce(P, 6000, 6, 1, 0.0)
    for m in managers * 2:
        assert m.fleet is not None
        request = m.fleet.collect(0.1)
        m.fleet.merge(request, store.exchange(request, 0.1), 0.1, 0.1)
    return managers


def test_the_document_gives_the_fleets_rate_beside_this_processs_and_the_user_of_the_connections() -> None:
    manager = shared_managers()[0]
    recent = RecentThrottles()
    recent.add(P, "producer_byte_rate", 0.5, 0.05)
    recent.add(P, "producer_byte_rate", 1.5, 0.08)
    doc = Explainer(manager, lambda: [view(), view(client_id="other")], lambda: 0.1, recent)("job-1")
    assert (doc["user"], doc["user_from"], doc["scope"]) == ("alice", "connection", "shared")
    [quota] = doc["quotas"]
    assert quota["rate"] == pytest.approx(6000 / 10.1) and quota["fleet_rate"] == pytest.approx(12_000 / 10.1)
    assert (quota["entity"], quota["level"]) == ("/clients/job-1", "7")
    assert doc["throttles"]["count"] == 2 and doc["throttles"]["largest_seconds"] == 1.5
    assert [c["client_ids"] for c in doc["connections"]] == [("job-1",)]
    [pool] = doc["pools"]
    # Its member is the entity it resolves to (/clients/job-1): one member per client id, whoever the user.
    assert pool["member"]["key"] == {"user": "", "client_id": "job-1", "client_id_prefix": None}


def test_a_budget_provider_plugged_in_at_assembly_answers_per_pool() -> None:
    manager = QuotaManager(quota_settings_from(SECTION), 0.0)
    changes = {"ingest": [{"at": 12.0, "budget": 4000.0, "reason": "latency above target"}]}
    doc = Explainer(manager, list, lambda: 0.0, None, lambda pool: changes.get(pool, []))("job-1", "alice")
    assert doc["user_from"] == "given" and doc["pools"][0]["budget_changes"] == changes["ingest"]
    assert doc["throttles"]["count"] == 0 and doc["connections"] == []


def test_the_text_says_the_same_as_the_document() -> None:
    manager = shared_managers()[0]
    doc = Explainer(manager, lambda: [view()], lambda: 0.1)("job-1")
    lines = render(doc)
    text = "\n".join(lines)
    assert lines[0] == ("kqp explain: client id 'job-1', user 'alice' (the user of its connections)  "
                        "[shared scope, pacing on]")
    assert "limit 1000B/s" in text and "rate 594.1B/s" in text and "fleet 1.2KiB/s" in text
    assert "from /clients/job-1 (level 7)" in text
    assert "  7   /clients/job-1" in text and "matched: decides producer_byte_rate" in text
    assert "10.0.0.7:5123 on broker-1  unknown Produce v3  honours throttles: no (version)  muted 0.40 s more" in text
    assert "ingest  producer_byte_rate  budget 4.9KiB/s" in text and "budget changes: not reported" in text


def test_a_group_member_is_told_its_mode_who_shares_its_budget_and_what_observing_counted() -> None:
    """etl-a is in the etl- prefix group (observed, 100 kB/s), with etl-b and etl-c seen lately; a
    stranger is not named. The observed throttles of the last minutes are their own section."""
    section = {"mode": "observe", "entities": [{"client_id_prefix": "etl-", "producer_byte_rate": 100_000},
                                               {"client_id": "solo", "producer_byte_rate": 5, "mode": "enforce"}]}
    manager = QuotaManager(quota_settings_from(section), 0.0)
    me = Principal("ANONYMOUS", "etl-a")
    seen = [me, Principal("ANONYMOUS", "etl-b"), Principal("ANONYMOUS", "etl-c"), Principal("ANONYMOUS", "solo")]
    observed = RecentThrottles()
    observed.add(me, "producer_byte_rate", 0.75, 0.05)
    observed.add(me, "producer_byte_rate", 0.5, 0.06, counted=0.0)   # within the first one's would-be mute
    doc = Explainer(manager, list, lambda: 0.1, None, None, observed, lambda: seen)("etl-a")
    [quota] = doc["quotas"]
    assert quota["mode"] == "observe"
    assert quota["shared"] == {"by": "client-id-prefix", "more": 0, "others": [
        {"user": "ANONYMOUS", "client_id": "etl-b"}, {"user": "ANONYMOUS", "client_id": "etl-c"}]}
    assert doc["observed"]["count"] == 2 and doc["throttles"]["count"] == 0
    text = "\n".join(render(doc))
    assert "OBSERVED (counted, not enforced)" in text
    assert "shares the prefix group's budget with: etl-b (user ANONYMOUS), etl-c (user ANONYMOUS)" in text
    assert "WOULD HAVE THROTTLED (observed quotas) (last 5 min): 2, 0.75 s muted at most, largest 0.75 s" in text
    solo = Explainer(manager, list, lambda: 0.1, None, None, observed, lambda: seen)("solo")
    assert solo["quotas"][0]["mode"] == "enforce" and "shared" not in solo["quotas"][0]


def test_the_member_class_and_the_pools_classes() -> None:
    # sampled: the credit below is what a sampled measurement's own burst leaves of burst_seconds
    m = QuotaManager(quota_settings_from({"window_size_seconds": 0.2, "algorithm": "sampled", "pools": [
        {"name": "ingest", "producer_byte_rate": 400_000, "members": [{"client_id_prefix": "job-"}], "classes": [
            {"name": "latency", "members": [{"client_id_prefix": "job-stream-"}], "max_share": 0.5,
             "burst_seconds": 4},
            {"name": "batch", "members": [{"client_id_prefix": "job-batch-"}]}]}]}), 0.0)
    m.record_produce(Principal("ANONYMOUS", "job-batch-1"), 80_000, 1, 1, 0.005)
    m.record_produce(Principal("ANONYMOUS", "job-stream-1"), 5000, 1, 1, 0.01)   # joins: the batch class cut
    for window in range(1, 12):   # the batch job offering 400 kB/s, held back; the stream 1 kB a second
        m.record_produce(Principal("ANONYMOUS", "job-batch-1"), 80_000, 1, 1, window * 0.2 + 0.01)
        if window % 5 == 0:
            m.record_produce(Principal("ANONYMOUS", "job-stream-1"), 1000, 1, 1, window * 0.2 + 0.01)
    doc = Explainer(m, list, lambda: 2.4)("job-stream-1", "ANONYMOUS")
    [pool] = doc["pools"]
    assert pool["class"] == "latency"
    latency, batch = pool["classes"]
    assert (latency["name"], latency["max_share"], latency["burst_seconds"], batch["name"]) == \
        ("latency", 0.5, 4.0, "batch")
    assert batch["held"] and batch["demand"] is None and batch["preemptions"] == 1
    # nearly quiet (1 kB a second pre-empts nobody), the stream saves what its share of 0.5 x 400k allows
    # beyond its measurement's own burst: (4 - 2.0) s x 200k
    assert pool["member"]["credit"] == pytest.approx(400_000)
    text = "\n".join(render(doc))
    assert "in class latency, burst credit 400,000; classes, highest first:" in text
    assert "      batch: allocation" in text and "pre-emptions 1" in text


def test_the_requests_by_api_say_which_group_protocols_a_client_takes_part_in() -> None:
    manager = QuotaManager(quota_settings_from(SECTION), 0.0)
    asked = {"ShareFetch": 12, "ShareAcknowledge": 4, "ShareGroupHeartbeat": 9, "Metadata": 2}
    doc = Explainer(manager, list, lambda: 0.0, requests=lambda p: asked if p.client_id == "job-1" else {})("job-1")
    assert doc["requests"] == asked and doc["group_protocols"] == ["share"]
    text = "\n".join(render(doc))
    assert "REQUESTS  (a member of a share group)" in text and "ShareFetch 12" in text
    assert Explainer(manager, list, lambda: 0.0)("job-1")["group_protocols"] == []
