"""QuotaManager: recording, throttles, live settings updates, expiry, fetch cap, KIP-599 admission.

Unless a test says otherwise: window 1 s x 11 samples, so a first burst is measured over
W = (11 - 1) full windows + the elapsed part of the current one.
"""

from __future__ import annotations

import tracemalloc

import pytest

from kqp.quotas.manager import QuotaManager, combine
from kqp.quotas.model import DEFAULT, EntitySpec, Principal, QuotaKey, QuotaSettings

ALICE = Principal("alice", "app")
ALICE_KEY = QuotaKey("alice", "")


def manager(entities: dict, **kw: float) -> QuotaManager:
    return QuotaManager(QuotaSettings(entities=entities, **kw), now=0.0)


def alice(**quotas: float) -> dict:
    return {EntitySpec("alice", None): quotas}


def test_no_quota_is_a_fast_no_op() -> None:
    m = manager({})
    assert not m.enabled
    assert m.record_produce(ALICE, 10**9, 10**6, 10**3, 0.0) == []
    assert m.record_fetch(ALICE, 10**9, 10**6, 10**3, 0.0) == []
    assert m.record_request(ALICE, 100.0, 0.0) == []
    assert m.record_mutations(ALICE, 10**6, 0.0) == []
    assert m.mutation_tokens_available(ALICE, 0.0)
    assert m.mutation_tokens(ALICE, 0.0) is None
    assert m.fetch_max_bytes_cap(ALICE) is None
    assert m.sensor_count == 0
    # the principal was never even resolved
    assert m.settings.resolution_cache == {}


def test_unmatched_principal_records_nothing() -> None:
    m = manager(alice(producer_byte_rate=1000))
    assert m.record_produce(Principal("bob", "app"), 10**9, 1, 1, 0.0) == []
    assert m.sensor_count == 0


def test_produce_byte_rate_throttle_is_uncapped() -> None:
    m = manager(alice(producer_byte_rate=1000))
    # 5000 B at t=0 over W = 10 s: 500 B/s, within quota
    assert m.record_produce(ALICE, 5000, 1, 1, 0.0) == []
    # +10000 B at t=0.5: 15000 / 10.5 B/s; X = (15000/10.5 - 1000) / 1000 * 10.5 = 15 - 10.5 = 4.5 s
    [v] = m.record_produce(ALICE, 10000, 1, 1, 0.5)
    assert v.quota_type == "producer_byte_rate"
    assert v.key == ALICE_KEY
    assert v.throttle_seconds == pytest.approx(4.5)  # more than one window: not capped


def test_recording_continues_while_over_quota() -> None:
    m = manager(alice(producer_byte_rate=1000))
    m.record_produce(ALICE, 15000, 1, 1, 0.0)  # 1500 B/s: over
    m.record_produce(ALICE, 5000, 1, 1, 0.0)  # still counted: 20000 / 10 = 2000 B/s
    [state] = m.snapshot(0.0)
    assert state.rate == 2000.0
    # X = (2000 - 1000) / 1000 * 10 = 10 s
    assert state.last_throttle_seconds == 10.0


def test_record_and_batch_rates() -> None:
    m = manager(alice(producer_record_rate=100, producer_batch_rate=1))
    assert m.counts_produce_records(ALICE)
    assert not m.counts_produce_records(Principal("bob", "x"))
    assert not m.counts_fetch_records(ALICE)
    # 2000 records in 20 batches at t=0: 200 rec/s, 2 batch/s over W = 10 s
    vs = m.record_produce(ALICE, 10, 2000, 20, 0.0)
    got = {v.quota_type: v.throttle_seconds for v in vs}
    # records: (200 - 100) / 100 * 10 = 10 s; batches: (2 - 1) / 1 * 10 = 10 s
    assert got == {"producer_record_rate": 10.0, "producer_batch_rate": 10.0}


def test_request_quotas_are_capped_at_one_window() -> None:
    m = manager(alice(request_rate=5))
    # 50 requests at t=0: 50 / 10 = 5/s, at the quota
    for _ in range(50):
        assert m.record_request(ALICE, 0.0, 0.0) == []
    # the 51st: 5.1/s -> X = (5.1 - 5) / 5 * 10 = 0.2 s
    [v] = m.record_request(ALICE, 0.0, 0.0)
    assert v.throttle_seconds == pytest.approx(0.2)
    for _ in range(9):
        m.record_request(ALICE, 0.0, 0.0)
    # 60 requests: 6/s -> X = (6 - 5) / 5 * 10 = 2 s, capped at the 1 s window
    [v] = m.record_request(ALICE, 0.0, 0.0)
    assert v.throttle_seconds == 1.0


def test_request_percentage_is_percent_of_one_thread() -> None:
    m = manager(alice(request_percentage=50))
    # 5.25 s of handler time at t=0 = 525 percent-seconds over W = 10 s -> 52.5 %
    # X = (52.5 - 50) / 50 * 10 = 0.5 s
    [v] = m.record_request(ALICE, 5.25, 0.0)
    assert v.quota_type == "request_percentage"
    assert v.throttle_seconds == pytest.approx(0.5)
    # another 2 s: 725 / 10 = 72.5 % -> X = 4.5 s, capped at 1 s
    [v] = m.record_request(ALICE, 2.0, 0.0)
    assert v.throttle_seconds == 1.0


def test_handler_time_after_the_decision_is_recorded_unchecked_and_judges_the_next_request() -> None:
    # 50 %, W = 10 s. A request charged 4 s as read (400 / 10 = 40 %: within); its response's 1.5 s is
    # added unchecked (Kafka's network-thread time: no throttle now, 55 % measured); the next request,
    # 0.01 s more, reads 55.1 %: X = (55.1 - 50) / 50 x 10 = 1.02 s, capped at one window, 1 s.
    m = manager(alice(request_percentage=50, request_rate=100))
    assert m.record_request(ALICE, 4.0, 0.0) == []
    m.add_handler_time(ALICE, 1.5, 0.0)
    [state] = [s for s in m.snapshot(0.0) if s.quota_type == "request_percentage"]
    assert state.rate == pytest.approx(55.0)
    [rate] = [s for s in m.snapshot(0.0) if s.quota_type == "request_rate"]
    assert rate.rate == pytest.approx(0.1), "the handler time alone: no second request counted"
    [v] = m.record_request(ALICE, 0.01, 0.0)
    assert v.quota_type == "request_percentage" and v.throttle_seconds == 1.0


def test_combine_over_a_produce_request() -> None:
    m = manager(alice(producer_byte_rate=1000, request_rate=0.5))
    vs = m.record_produce(ALICE, 20000, 1, 1, 0.0)  # 2000 B/s -> X = 10 s
    vs += m.record_request(ALICE, 0.0, 0.0)  # 0.1/s: fine
    for _ in range(10):
        vs += m.record_request(ALICE, 0.0, 0.0)  # 1.1/s -> capped at 1 s
    assert combine(vs) == (10.0, "producer_byte_rate")


def test_fetch_cap_is_quota_times_window_count_minus_one() -> None:
    m = manager(alice(consumer_byte_rate=1000))
    # 1000 B/s x (11 - 1) x 1 s = 10000 B: one such fetch alone reads 10000 / 10 = quota
    assert m.fetch_max_bytes_cap(ALICE) == 10000
    assert m.record_fetch(ALICE, 10000, 0, 0, 0.0) == []
    assert m.fetch_max_bytes_cap(Principal("bob", "x")) is None
    m2 = manager(alice(consumer_byte_rate=1000), window_size_seconds=2.0, window_count=5)
    assert m2.fetch_max_bytes_cap(ALICE) == 8000  # 1000 x 4 x 2


def test_unrecord_fetch_takes_bytes_back() -> None:
    m = manager(alice(consumer_byte_rate=1000))
    assert m.record_fetch(ALICE, 30000, 0, 0, 0.0)  # 3000 B/s: throttled
    m.unrecord_fetch(ALICE, 30000, 0, 0, 0.0)  # answered empty: the bytes do not count
    [state] = m.snapshot(0.0)
    assert state.rate == 0.0


def test_limits_lists_every_quota_in_force() -> None:
    m = manager({
        EntitySpec("alice", DEFAULT): {"producer_byte_rate": 1.0},
        EntitySpec(None, DEFAULT): {"request_rate": 2.0},
    })
    assert m.limits(ALICE) == {
        "producer_byte_rate": (QuotaKey("alice", "app"), 1.0),
        "request_rate": (QuotaKey("", "app"), 2.0),
    }


def test_update_settings_keeps_measurement_and_applies_new_limit() -> None:
    m = manager(alice(producer_byte_rate=1000))
    assert m.record_produce(ALICE, 5000, 1, 1, 0.0) == []  # 500 B/s
    lines = m.update_settings(QuotaSettings(entities=alice(producer_byte_rate=400)), now=0.5)
    assert lines == ["/users/alice: producer_byte_rate 1000 -> 400"]
    [state] = m.snapshot(0.5)
    assert state.limit == 400.0
    assert state.rate == pytest.approx(5000 / 10.5)  # not reset
    # recording 0 B at 0.5 checks the kept rate against the new limit:
    # X = (5000/10.5 - 400) / 400 * 10.5 = (5000 - 4200) / 400 = 2 s
    [v] = m.record_produce(ALICE, 0, 0, 0, 0.5)
    assert v.throttle_seconds == pytest.approx(2.0)


def test_update_settings_releases_removed_quotas() -> None:
    m = manager(alice(producer_byte_rate=1000, request_rate=10))
    m.record_produce(ALICE, 100, 1, 1, 0.0)
    m.record_request(ALICE, 0.0, 0.0)
    assert m.sensor_count == 2
    lines = m.update_settings(QuotaSettings(entities=alice(request_rate=10)), now=1.0)
    assert lines == [
        "/users/alice: producer_byte_rate removed (was 1000)",
        "released 1 sensor(s) whose quota no longer applies",
    ]
    assert [(s.quota_type, s.key) for s in m.snapshot(1.0)] == [("request_rate", ALICE_KEY)]
    assert m.record_produce(ALICE, 10**9, 1, 1, 1.0) == []  # producer quota gone: fast path


def test_update_settings_moves_keys_when_the_matching_level_changes() -> None:
    m = manager(alice(producer_byte_rate=1000))
    m.record_produce(ALICE, 5000, 1, 1, 0.0)
    new = {EntitySpec("alice", DEFAULT): {"producer_byte_rate": 1000.0}}
    lines = m.update_settings(QuotaSettings(entities=new), now=0.0)
    assert lines == [
        "/users/alice: producer_byte_rate removed (was 1000)",
        "/users/alice/clients/<default>: producer_byte_rate set to 1000",
        "released 1 sensor(s) whose quota no longer applies",
    ]
    # (alice, "") was alice's shared sensor; under /users/alice/clients/<default> only a client
    # with an empty client id would be tagged so, and Kafka's quotaLimit gives those tags no quota
    # (neither /users/alice nor /users/<default> is set): released.
    assert m.sensor_count == 0
    m.record_produce(ALICE, 5000, 1, 1, 0.0)
    assert [s.key for s in m.snapshot(0.0)] == [QuotaKey("alice", "app")]


def test_empty_client_id_is_charged_as_kafka_tags_it() -> None:
    # /clients/<default> does not apply to an empty client id (Kafka's quotaLimit has no branch for
    # the tags ("", "")): nothing is charged, no sensor is made.
    m = manager({EntitySpec(None, DEFAULT): {"producer_byte_rate": 1000}})
    assert m.record_produce(Principal("alice", ""), 10**6, 1, 1, 0.0) == []
    assert m.sensor_count == 0
    # Under /users/alice the nameless client shares alice's (alice, "") sensor; adding
    # /users/alice/clients/<default> moves alice/app to its own sensor, but the nameless client
    # stays on (alice, "") at /users/alice's limit, so that sensor survives the update.
    m = manager(alice(producer_byte_rate=1000))
    m.record_produce(Principal("alice", ""), 100, 1, 1, 0.0)
    new = {**alice(producer_byte_rate=1000), EntitySpec("alice", DEFAULT): {"producer_byte_rate": 50}}
    m.update_settings(QuotaSettings(entities=new), now=1.0)
    assert [(s.key, s.limit) for s in m.snapshot(1.0)] == [(ALICE_KEY, 1000)]
def test_update_settings_lines_one_per_quota_in_entity_path_order() -> None:
    # These lines are what the reload driver logs as "quota change: ..." (README, live reload).
    old = {
        EntitySpec("zed", None): {"consumer_byte_rate": 10.0},
        EntitySpec(None, DEFAULT): {"request_rate": 100.0},
        EntitySpec("alice", "w"): {"producer_byte_rate": 1048576.0, "request_rate": 500.0},
    }
    m = manager(old)
    assert m.update_settings(QuotaSettings(entities=dict(old)), now=0.0) == []  # nothing changed, nothing said
    new = {
        EntitySpec("zed", None): {"consumer_byte_rate": 10.0},
        EntitySpec("alice", "w"): {"producer_byte_rate": 2097152.0, "request_percentage": 12.5},
        EntitySpec("bob", None): {"consumer_byte_rate": 0.5},
    }
    assert m.update_settings(QuotaSettings(entities=new), now=0.0) == [
        "/clients/<default>: request_rate removed (was 100)",
        "/users/alice/clients/w: producer_byte_rate 1048576 -> 2097152",
        "/users/alice/clients/w: request_percentage set to 12.5",  # within an entity, in QUOTA_TYPES order
        "/users/alice/clients/w: request_rate removed (was 500)",
        "/users/bob: consumer_byte_rate set to 0.5",
    ]


def test_window_change_restarts_measurements() -> None:
    m = manager(alice(producer_byte_rate=1000))
    m.record_produce(ALICE, 5000, 1, 1, 0.0)
    lines = m.update_settings(QuotaSettings(window_count=5, entities=alice(producer_byte_rate=1000)), 1.0)
    assert lines[0] == "quota window 11 x 1s -> 5 x 1s: all measurements restart"
    assert m.sensor_count == 0


def test_expire_drops_idle_sensors() -> None:
    m = manager({EntitySpec(DEFAULT, None): {"producer_byte_rate": 1000}})
    m.record_produce(Principal("a", "x"), 1, 1, 1, 0.0)
    m.record_produce(Principal("b", "x"), 1, 1, 1, 3000.0)
    assert m.expire(3600.0, idle_seconds=3600.0) == 1  # a: idle 3600 s
    assert [s.key for s in m.snapshot(3600.0)] == [QuotaKey("b", "")]
    assert m.expire(3600.0, idle_seconds=3600.0) == 0


@pytest.mark.parametrize("gone", ["expired", "reloaded"])
def test_a_sensor_made_anew_is_the_one_charged(gone: str) -> None:
    # What a principal's charges record into is found once; a sensor dropped by expiry or by a reload
    # (new windows) must not go on being charged out of sight of the snapshot and the metrics.
    settings = QuotaSettings(entities=alice(producer_byte_rate=1000, request_rate=10))
    m = QuotaManager(settings, now=0.0)
    m.record_produce(ALICE, 500, 1, 1, 0.0)
    m.record_request(ALICE, 0.001, 0.0)
    if gone == "expired":
        assert m.expire(3600.0, idle_seconds=3600.0) == 2
    else:
        m.update_settings(QuotaSettings(entities=settings.entities, window_size_seconds=2.0), 3600.0)
        assert m.sensor_count == 0
    m.record_produce(ALICE, 700, 1, 1, 3600.0)
    m.record_request(ALICE, 0.001, 3600.0)
    produced = m.sensor("producer_byte_rate", ALICE_KEY)
    requested = m.sensor("request_rate", ALICE_KEY)
    assert produced is not None and produced.rate.total(3600.0) == 700
    assert requested is not None and requested.rate.total(3600.0) == 1


def test_kip599_permissive_example() -> None:
    # Q = 5/s, 100 windows of 1 s: burst 500. 560 mutations at once: admitted, K = -60, 12 s.
    m = manager(alice(controller_mutation_rate=5), window_count=100)
    assert m.mutation_tokens(ALICE, 0.0) == 500     # a new bucket starts full; looking spends nothing
    [v] = m.record_mutations(ALICE, 560, 0.0)
    assert v.quota_type == "controller_mutation_rate"
    assert v.throttle_seconds == 12.0
    assert m.mutation_tokens(ALICE, 0.0) == -60
    assert m.mutation_tokens(Principal("bob", "x"), 0.0) is None     # no quota for bob
    # the next request is rejected until the bucket refills: at 11.5 s, K = -60 + 57.5 = -2.5
    assert not m.mutation_tokens_available(ALICE, 11.5)
    assert m.mutation_tokens_available(ALICE, 12.0)  # K = 0
    [state] = m.snapshot(12.0)
    assert state.tokens == 0.0
    assert state.entity == EntitySpec("alice", None)
    # the observed mutation rate: 560 over W = 12 s elapsed + (99 - 12) padding windows = 99 s
    assert state.rate == pytest.approx(560 / 99)


def test_kip599_strict_per_topic_admission() -> None:
    m = manager(alice(controller_mutation_rate=5), window_count=100)
    # 7 topics of 80 partitions at t=0: before the 7th, K = 500 - 6 * 80 = 20 >= 0, so all 7 are
    # admitted and K ends at -60; an admitted topic never throttles (StrictControllerMutationQuota)
    for _ in range(7):
        assert m.admit_mutations(ALICE, 80, 0.0) is None
    # an 8th topic is rejected with THROTTLING_QUOTA_EXCEEDED and -K/R = 60/5 = 12 s
    v = m.admit_mutations(ALICE, 80, 0.0)
    assert v is not None and v.throttle_seconds == 12.0
    # rejected topics are not recorded: at 11.5 s, K = -2.5, still rejected, 0.5 s to go
    v = m.admit_mutations(ALICE, 80, 11.5)
    assert v is not None and v.throttle_seconds == pytest.approx(0.5)
    assert m.admit_mutations(ALICE, 80, 12.0) is None  # K = 0: admitted again


def test_kip599_changed_rate_keeps_the_debt_and_repays_it_at_the_new_rate() -> None:
    # Q = 5/s, 100 windows of 1 s: B = 500; 560 mutations at t = 0 leave K = -60 (throttle 12 s).
    m = manager(alice(controller_mutation_rate=5), window_count=100)
    [v] = m.record_mutations(ALICE, 560, 0.0)
    assert v.throttle_seconds == pytest.approx(12.0)
    # Q 5 -> 10 at t = 4, the bucket untouched since t = 0: as in Kafka the swap leaves the tokens
    # alone and the next refill credits the 4 s at the new rate, K = -60 + 40 = -20, B = 1000.
    lines = m.update_settings(QuotaSettings(window_count=100, entities=alice(controller_mutation_rate=10)), 4.0)
    assert lines == ["/users/alice: controller_mutation_rate 5 -> 10"]
    [state] = [s for s in m.snapshot(4.0) if s.quota_type == "controller_mutation_rate"]
    assert (state.limit, state.tokens) == (10.0, pytest.approx(-20.0))
    # strict admission still refuses (K < 0) and names the new throttle, 20 / 10 = 2 s
    v = m.admit_mutations(ALICE, 1, 4.0)
    assert v is not None and v.throttle_seconds == pytest.approx(2.0)
    assert m.admit_mutations(ALICE, 1, 6.0) is None  # K = 0 at t = 6


def test_zero_quota_blocks_for_the_whole_span() -> None:
    m = manager(alice(producer_byte_rate=0))
    [v] = m.record_produce(ALICE, 1, 0, 0, 0.0)
    assert v.throttle_seconds == 11.0  # 11 windows of 1 s


def test_ten_thousand_entities_are_cheap() -> None:
    m = manager({EntitySpec(DEFAULT, DEFAULT): {"producer_byte_rate": 1e6, "request_rate": 100}})
    principals = [Principal(f"user{i}", f"client{i}") for i in range(10_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for p in principals:
            m.record_produce(p, 100, 1, 1, 0.0)
            m.record_request(p, 0.001, 0.0)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert m.sensor_count == 20_000
    # per principal: two sensors, one resolution cache entry and its keys
    assert used / 10_000 < 4096, used


def observing(**quotas: float) -> QuotaSettings:
    spec = EntitySpec("alice", None)
    return QuotaSettings(entities={spec: quotas}, modes={spec: "observe"})


def test_an_observed_quota_is_charged_and_checked_as_if_enforced() -> None:
    """The arithmetic of test_produce_byte_rate_throttle_is_uncapped, the violation marked observed."""
    m = QuotaManager(observing(producer_byte_rate=1000), now=0.0)
    assert m.record_produce(ALICE, 5000, 1, 1, 0.0) == []
    [v] = m.record_produce(ALICE, 10000, 1, 1, 0.5)
    assert v.observed and v.throttle_seconds == pytest.approx(4.5)
    assert m.observed(ALICE, "producer_byte_rate") and not m.observed(ALICE, "consumer_byte_rate")
    enforced = manager(alice(producer_byte_rate=1000))
    enforced.record_produce(ALICE, 5000, 1, 1, 0.0)
    assert not enforced.record_produce(ALICE, 10000, 1, 1, 0.5)[0].observed


def test_an_observed_quota_caps_no_fetch_and_holds_no_request_back() -> None:
    m = QuotaManager(observing(consumer_byte_rate=1000, request_rate=5), now=0.0)
    assert m.fetch_max_bytes_cap(ALICE) is None
    # Its Fetch responses are charged (its throttle is decided then), but it holds no Fetch back.
    assert m.charges_fetches(ALICE) and not m.charges_fetches(ALICE, enforced=True)
    assert m.record_fetch(ALICE, 30000, 0, 0, 0.0)[0].observed   # measured all the same
    [v] = [v for _ in range(60) for v in m.record_request(ALICE, 0.0, 0.0)][-1:]
    assert v.observed and v.quota_type == "request_rate"
    enforced = manager(alice(consumer_byte_rate=1000))
    assert enforced.fetch_max_bytes_cap(ALICE) == 10000 and enforced.charges_fetches(ALICE, enforced=True)
    assert not manager(alice(request_rate=5)).charges_fetches(ALICE)   # request quotas are decided as read


def test_switching_mode_keeps_the_measurement_and_says_so() -> None:
    m = QuotaManager(observing(producer_byte_rate=1000), now=0.0)
    m.record_produce(ALICE, 5000, 1, 1, 0.0)
    lines = m.update_settings(QuotaSettings(entities=alice(producer_byte_rate=1000)), now=0.5)
    assert lines == ["/users/alice: mode observe -> default"]
    [state] = m.snapshot(0.5)
    assert state.rate == pytest.approx(5000 / 10.5)   # the same sensor, not reset
    [v] = m.record_produce(ALICE, 10000, 1, 1, 0.5)
    assert not v.observed and v.throttle_seconds == pytest.approx(4.5)
    assert m.update_settings(QuotaSettings(entities=alice(producer_byte_rate=1000), mode="observe"), 0.6) == [
        "quotas.mode enforce -> observe"]
    assert m.record_produce(ALICE, 0, 0, 0, 0.6)[0].observed


def test_an_observed_pool_still_divides_and_charges_its_throttles_are_observed() -> None:
    from kqp.quotas.pools.spec import MemberSelector, PoolSpec

    pool = PoolSpec("ingest", {"consumer_byte_rate": 1000.0}, (MemberSelector(user="alice"),), mode="observe")
    m = QuotaManager(QuotaSettings(pools=(pool,)), now=0.0)
    [v] = m.record_fetch(ALICE, 30000, 0, 0, 0.0)
    assert v.pool == "ingest" and v.observed
    assert m.fetch_max_bytes_cap(ALICE) is None and not m.charges_fetches(ALICE, enforced=True)
    [state] = m.pools.snapshot(0.0)
    assert state.observed and state.members and state.members[0].usage >= 0
    m.update_settings(QuotaSettings(pools=(PoolSpec("ingest", {"consumer_byte_rate": 1000.0},
                                                    (MemberSelector(user="alice"),)),)), now=0.1)
    assert not m.record_fetch(ALICE, 30000, 0, 0, 0.1)[0].observed and m.charges_fetches(ALICE, enforced=True)
