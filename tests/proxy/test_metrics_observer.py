"""PrometheusObserver as pure code: hooks in, exact series out; expiry on an injected clock; the cap.

No sockets and no sleeps: the observer's clock is a list the test moves, and the scrape-time gauges
read a stand-in context holding a real QuotaManager and DelayQueue.
"""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from kqp.protocol.apis import ApiKey
from kqp.proxy.observability.metrics import OTHER, PrometheusObserver, UpstreamHealth
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import EntitySpec, Principal, QuotaSettings

METERED = Principal("ANONYMOUS", "metered")
FREE = Principal("ANONYMOUS", "free")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(expiry: float = 60.0, max_entities: int = 100) -> tuple[PrometheusObserver, Clock]:
    clock = Clock()
    return PrometheusObserver(entity_expiry_seconds=expiry, max_entities=max_entities, clock=clock,
                              process_metrics=False), clock


def value(obs: PrometheusObserver, name: str, **labels: str) -> float | None:
    return obs.registry.get_sample_value(name, labels)


def series_names(obs: PrometheusObserver) -> str:
    return generate_latest(obs.registry).decode()


def test_traffic_hooks_count_exactly_what_they_are_told() -> None:
    obs, _ = make()
    for _ in range(3):
        obs.request(METERED, ApiKey.Produce, 1000)
        obs.produced(METERED, 1000, 10)
        obs.handler_time(METERED, 0.002)
    obs.request(METERED, ApiKey.Metadata, 50)
    obs.request(FREE, ApiKey.Fetch, 80)
    obs.fetched(FREE, 4096, 7)
    who = {"user": "ANONYMOUS", "client_id": "metered"}
    assert value(obs, "kqp_bytes_total", direction="produce", **who) == 3000
    assert value(obs, "kqp_records_total", direction="produce", **who) == 30
    assert value(obs, "kqp_requests_total", api="Produce", **who) == 3
    assert value(obs, "kqp_requests_total", api="Metadata", **who) == 1
    assert value(obs, "kqp_request_handler_seconds_total", **who) == pytest.approx(0.006)
    assert value(obs, "kqp_bytes_total", direction="fetch", user="ANONYMOUS", client_id="free") == 4096
    assert value(obs, "kqp_records_total", direction="fetch", user="ANONYMOUS", client_id="free") == 7
    # Label sets are created on use only: metered fetched nothing, so it has no fetch series.
    assert value(obs, "kqp_bytes_total", direction="fetch", **who) is None


def test_throttle_hook_adds_seconds_and_responses_per_quota() -> None:
    obs, _ = make()
    obs.throttled(METERED, "producer_byte_rate", 0.25)
    obs.throttled(METERED, "producer_byte_rate", 0.5)
    obs.throttled(METERED, "request_rate", 1.0)
    who = {"user": "ANONYMOUS", "client_id": "metered"}
    assert value(obs, "kqp_throttle_seconds_total", quota="producer_byte_rate", **who) == 0.75
    assert value(obs, "kqp_throttled_responses_total", quota="producer_byte_rate", **who) == 2
    assert value(obs, "kqp_throttle_seconds_total", quota="request_rate", **who) == 1.0


def test_connections_latency_and_reloads() -> None:
    obs, _ = make()
    obs.connection_opened("bootstrap")
    obs.connection_opened("broker-1")
    obs.connection_opened("broker-1")
    obs.connection_closed("broker-1", "idle")
    obs.response(METERED, ApiKey.Produce, 100, 0.003)
    obs.response(METERED, ApiKey.Produce, 100, 0.2)
    obs.config_reload("failure")
    assert value(obs, "kqp_connections", listener="bootstrap") == 1
    assert value(obs, "kqp_connections", listener="broker-1") == 1
    assert value(obs, "kqp_connections_closed_total", reason="idle") == 1
    # Known reasons and results exist at zero before anything happened, so alerts see the series.
    assert value(obs, "kqp_connections_closed_total", reason="upstream_unreachable") == 0
    assert value(obs, "kqp_config_reloads_total", result="success") == 0
    assert value(obs, "kqp_config_reloads_total", result="failure") == 1
    assert value(obs, "kqp_upstream_request_duration_seconds_count", api="Produce") == 2
    assert value(obs, "kqp_upstream_request_duration_seconds_sum", api="Produce") == pytest.approx(0.203)
    assert value(obs, "kqp_upstream_request_duration_seconds_bucket", api="Produce", le="0.005") == 1
    assert "_created" not in series_names(obs)


def test_refused_connections_count_as_closed_but_never_as_open() -> None:
    obs, _ = make()
    obs.connection_opened("bootstrap")
    obs.connection_refused("bootstrap", "tls_plaintext")
    obs.connection_refused("broker-1", "tls_certificate_expired")
    assert value(obs, "kqp_connections", listener="bootstrap") == 1
    assert value(obs, "kqp_connections", listener="broker-1") is None
    assert value(obs, "kqp_connections_closed_total", reason="tls_plaintext") == 1
    assert value(obs, "kqp_connections_closed_total", reason="tls_certificate_expired") == 1
    assert value(obs, "kqp_connections_closed_total", reason="tls_principal_unmapped") == 0


def test_idle_entities_expire_from_memory_and_from_the_exposition() -> None:
    obs, clock = make(expiry=60)
    obs.request(METERED, ApiKey.Produce, 10)            # t=0
    obs.produced(METERED, 10, 1)
    obs.throttled(METERED, "producer_byte_rate", 0.1)
    clock.t = 30.0
    obs.request(FREE, ApiKey.Produce, 10)               # t=30
    clock.t = 59.9
    assert obs.expire() == 0                     # metered idle 59.9 s < 60
    clock.t = 60.0
    assert obs.expire() == 1                     # metered idle 60 s: gone; free idle 30 s stays
    text = series_names(obs)
    assert 'client_id="metered"' not in text
    assert 'client_id="free"' in text
    assert obs.entity_count == 1
    # A returning entity starts again from zero, like a re-created Kafka sensor.
    obs.request(METERED, ApiKey.Produce, 10)
    assert value(obs, "kqp_requests_total", api="Produce", user="ANONYMOUS", client_id="metered") == 1
    clock.t = 200.0
    assert obs.expire() == 2
    assert obs.entity_count == 0


def test_responses_do_not_keep_an_entity_alive_but_requests_do() -> None:
    obs, clock = make(expiry=10)
    obs.request(METERED, ApiKey.Fetch, 10)
    clock.t = 9.0
    obs.fetched(METERED, 100, 1)                 # the response to the t=0 request: not new activity
    clock.t = 10.0
    assert obs.expire() == 1


def test_cap_holds_under_ten_thousand_client_ids() -> None:
    obs, _ = make(max_entities=1000)
    for i in range(10_000):
        p = Principal("ANONYMOUS", f"c-{i}")
        obs.request(p, ApiKey.Produce, 100)
        obs.produced(p, 100, 1)
    # 1000 entities of their own plus the one `other` bucket, whatever the number of client ids.
    assert obs.entity_count == 1001
    other = {"user": OTHER, "client_id": OTHER}
    assert value(obs, "kqp_requests_total", api="Produce", **other) == 9000
    assert value(obs, "kqp_bytes_total", direction="produce", **other) == 900_000
    assert value(obs, "kqp_requests_total", api="Produce", user="ANONYMOUS", client_id="c-999") == 1
    assert value(obs, "kqp_requests_total", api="Produce", user="ANONYMOUS", client_id="c-1000") is None
    assert generate_latest(obs.registry).decode().count("kqp_requests_total{") == 1001


def test_expiry_makes_room_under_the_cap() -> None:
    obs, clock = make(expiry=10, max_entities=2)
    obs.request(Principal("u", "a"), ApiKey.Produce, 1)
    obs.request(Principal("u", "b"), ApiKey.Produce, 1)
    obs.request(Principal("u", "c"), ApiKey.Produce, 1)  # past the cap: counted as other
    assert value(obs, "kqp_requests_total", api="Produce", user="u", client_id="c") is None
    clock.t = 20.0
    obs.expire()
    obs.request(Principal("u", "c"), ApiKey.Produce, 1)
    assert value(obs, "kqp_requests_total", api="Produce", user="u", client_id="c") == 1


# -- scrape-time gauges ------------------------------------------------------------------------

def bound(clock: Clock, settings: QuotaSettings, obs: PrometheusObserver,
          age: list[float | None] | None = None, readiness=None) -> QuotaManager:
    """Bind `obs` as the server does; `age[0]` is the upstream Metadata age the gauges read."""
    quotas = QuotaManager(settings, 0.0)
    ages = age if age is not None else [None]
    obs.bind(clock, quotas, lambda: UpstreamHealth(ages[0], 90.0), readiness)
    return quotas


SETTINGS = QuotaSettings(entities={
    EntitySpec(None, "metered"): {"producer_byte_rate": 100.0},
    EntitySpec("ANONYMOUS", None): {"request_rate": 50.0},  # shared by every ANONYMOUS client
})


def test_quota_limit_and_usage_per_entity() -> None:
    obs, clock = make()
    quotas = bound(clock, SETTINGS, obs)
    obs.request(METERED, ApiKey.Produce, 1100)
    obs.request(FREE, ApiKey.Produce, 10)
    quotas.record_produce(METERED, 1100, 1, 1, 0.0)
    for p in (METERED, FREE, FREE):
        quotas.record_request(p, 0.001, 0.0)
    who = {"user": "ANONYMOUS", "client_id": "metered"}
    assert value(obs, "kqp_quota_limit", quota="producer_byte_rate", **who) == 100
    # 1100 bytes in the first sample; Kafka's Rate divides by at least (11 - 1) windows of 1 s: 110 B/s.
    assert value(obs, "kqp_quota_usage", quota="producer_byte_rate", **who) == pytest.approx(110)
    # /users/ANONYMOUS is one sensor for all its clients: 3 requests / 10 s, shown on each client.
    assert value(obs, "kqp_quota_limit", quota="request_rate", **who) == 50
    assert value(obs, "kqp_quota_usage", quota="request_rate", **who) == pytest.approx(0.3)
    assert value(obs, "kqp_quota_usage", quota="request_rate", user="ANONYMOUS", client_id="free") == \
        pytest.approx(0.3)
    assert value(obs, "kqp_quota_limit", quota="producer_byte_rate", user="ANONYMOUS", client_id="free") is None


def test_a_prefix_group_has_series_of_its_own() -> None:
    obs, clock = make()
    group = {"quota": "producer_byte_rate", "user": "", "client_id_prefix": "spark-job-42-"}
    settings = QuotaSettings(entities={EntitySpec(None, None, "spark-job-42-"): {"producer_byte_rate": 100.0}})
    quotas = bound(clock, settings, obs)
    for n, nbytes in ((1, 600), (2, 500)):
        executor = Principal("ANONYMOUS", f"spark-job-42-{n}")
        obs.request(executor, ApiKey.Produce, nbytes)
        quotas.record_produce(executor, nbytes, 1, 1, 0.0)
    # One group, one series: (600 + 500) B over (11 - 1) windows of 1 s = 110 B/s.
    assert value(obs, "kqp_quota_group_limit", **group) == 100
    assert value(obs, "kqp_quota_group_usage", **group) == pytest.approx(110)
    # Each member's own series shows the group's shared rate, as for any shared quota.
    assert value(obs, "kqp_quota_usage", quota="producer_byte_rate", user="ANONYMOUS",
                 client_id="spark-job-42-2") == pytest.approx(110)
    assert "kqp_quota_group_usage{" not in series_names(make()[0])


def test_delay_queue_and_muted_gauges() -> None:
    obs, clock = make()
    bound(clock, SETTINGS, obs)
    for cause in [(METERED, "producer_byte_rate")] * 3 + [(FREE, "request_rate")]:
        obs.mute_started(*cause)
    obs.mute_ended(METERED, "producer_byte_rate")   # one of the three throttles passed
    assert value(obs, "kqp_delay_queue_size", quota="producer_byte_rate") == 2
    assert value(obs, "kqp_delay_queue_size", quota="request_rate") == 1
    assert value(obs, "kqp_delay_queue_size", quota="consumer_byte_rate") == 0
    assert value(obs, "kqp_muted_connections") == 3
    assert value(obs, "kqp_entity_muted_connections", user="ANONYMOUS", client_id="metered") == 2
    assert value(obs, "kqp_entity_muted_connections", user="ANONYMOUS", client_id="free") == 1


def test_muted_seconds_count_each_connection_for_as_long_as_it_is_muted() -> None:
    obs, clock = make()
    who = {"quota": "producer_byte_rate", "user": "ANONYMOUS", "client_id": "metered"}
    obs.mute_started(METERED, "producer_byte_rate")         # connection 1 muted from 0 s
    clock.t = 1.0
    obs.mute_started(METERED, "producer_byte_rate")         # connection 2 muted from 1 s
    clock.t = 1.5
    # A mute still running counts up to the scrape: 1.5 s + 0.5 s.
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(2.0)
    clock.t = 2.0
    obs.mute_ended(METERED, "producer_byte_rate")           # one of them unmuted at 2 s
    clock.t = 4.0
    # 0-1 s one connection, 1-2 s two, 2-4 s one: 1 + 2 + 2 = 5 connection-seconds.
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(5.0)
    obs.mute_ended(METERED, "producer_byte_rate")
    clock.t = 10.0
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(5.0)   # none muted since 4 s
    assert value(obs, "kqp_muted_connections") == 0


def test_a_mute_counts_until_its_throttle_was_due_not_until_a_late_timer() -> None:
    obs, clock = make()
    who = {"quota": "producer_byte_rate", "user": "ANONYMOUS", "client_id": "metered"}
    obs.mute_started(METERED, "producer_byte_rate")         # connection 1 muted from 0 s until 1 s
    obs.mute_started(METERED, "producer_byte_rate")         # connection 2 muted from 0 s, still muted
    clock.t = 1.02                                          # the busy loop fires 1's timer 20 ms late
    obs.mute_ended(METERED, "producer_byte_rate", due=1.0)
    clock.t = 2.0
    # Connection 1: 0-1 s (not the late 20 ms); connection 2: 0-2 s. 1 + 2 = 3 connection-seconds.
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(3.0)
    obs.mute_started(METERED, "producer_byte_rate")         # connection 1 again, due at 2.5 s
    clock.t = 2.51
    # The scrape at 2.51 s counts connection 1's running mute up to then: 2 + 2*0.51 = 4.02 ...
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(4.02)
    clock.t = 2.52
    obs.mute_ended(METERED, "producer_byte_rate", due=2.5)
    # ... and no more: connection 1's second mute lasted 2.0-2.5 s (the scrape counted 10 ms past its
    # due time, which a counter cannot take back) while connection 2's ran on to 2.52 s:
    # 1 + 0.5 + 2.52 = 4.02, the scrape's figure, kept.
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(4.02)
    clock.t = 3.0
    obs.mute_ended(METERED, "producer_byte_rate", due=3.0)
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(4.5)   # 1 + 0.5 + 3.0, exact again


def test_a_late_timer_does_not_lend_its_lateness_to_a_mute_that_began_meanwhile() -> None:
    """Connection 1 is muted 0-1 s, its timer fires 10 ms late; connection 2's mute began at 1.005 s,
    in between, and ends at 2 s: 1 + 0.995 connection-seconds, what the two were told, not 2.0."""
    obs, clock = make()
    who = {"quota": "producer_byte_rate", "user": "ANONYMOUS", "client_id": "metered"}
    obs.mute_started(METERED, "producer_byte_rate", at=0.0)
    clock.t = 1.005
    obs.mute_started(METERED, "producer_byte_rate", at=1.005)
    clock.t = 1.01
    obs.mute_ended(METERED, "producer_byte_rate", due=1.0)
    clock.t = 2.0
    obs.mute_ended(METERED, "producer_byte_rate", due=2.0)
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(1.995)


def test_a_mute_counts_from_its_decision_not_from_when_the_observer_hears_of_it() -> None:
    """A 1 MB frame's handling takes milliseconds between the read that decided its throttle and
    the hook: the mute counts from the decision (`at`), as long as the client is told."""
    obs, clock = make()
    who = {"quota": "producer_byte_rate", "user": "ANONYMOUS", "client_id": "metered"}
    clock.t = 1.005
    obs.mute_started(METERED, "producer_byte_rate", at=1.0)    # decided at 1.0 s, heard 5 ms later
    clock.t = 2.0
    obs.mute_ended(METERED, "producer_byte_rate", due=2.0)
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(1.0)
    clock.t = 3.0
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(1.0)   # a scrape folds at 3.0 s
    obs.mute_started(METERED, "producer_byte_rate", at=2.9)    # decided before that fold: added at once
    clock.t = 3.5
    obs.mute_ended(METERED, "producer_byte_rate", due=3.5)
    assert value(obs, "kqp_muted_seconds_total", **who) == pytest.approx(1.6)


def test_a_prefix_group_names_its_members() -> None:
    obs, clock = make()
    settings = QuotaSettings(entities={EntitySpec(None, None, "etl-"): {"producer_byte_rate": 100.0},
                                       EntitySpec(None, "etl-special"): {"producer_byte_rate": 50.0}})
    quotas = bound(clock, settings, obs)
    for client_id in ("etl-a", "etl-special", "other"):
        obs.request(Principal("ANONYMOUS", client_id), ApiKey.Produce, 10)
        quotas.record_produce(Principal("ANONYMOUS", client_id), 10, 1, 1, 0.0)
    member = {"quota": "producer_byte_rate", "user": "", "client_id_prefix": "etl-", "member_user": "ANONYMOUS"}
    assert value(obs, "kqp_quota_group_member", **member, member_client_id="etl-a") == 1
    # An exact client-id entity outranks the prefix: etl-special has its own quota, and no membership.
    assert value(obs, "kqp_quota_group_member", **member, member_client_id="etl-special") is None
    assert "member_client_id=\"other\"" not in series_names(obs)


def test_upstream_health_gauges() -> None:

    obs, clock = make()
    age: list[float | None] = [None]
    bound(clock, QuotaSettings(), obs, age, readiness=lambda: (False, "starting"))
    assert value(obs, "kqp_upstream_up") == 0
    assert value(obs, "kqp_upstream_metadata_age_seconds") is None
    assert value(obs, "kqp_ready") == 0
    age[0] = 5.0
    assert value(obs, "kqp_upstream_up") == 1
    assert value(obs, "kqp_upstream_metadata_age_seconds") == 5.0
    age[0] = 91.0     # older than the 90 s (3 x 30 s) the server says is fresh
    assert value(obs, "kqp_upstream_up") == 0


def test_expire_also_expires_quota_sensors() -> None:
    obs, clock = make(expiry=60)
    quotas = bound(clock, SETTINGS, obs)
    quotas.record_produce(METERED, 10, 1, 1, 0.0)
    assert quotas.sensor_count == 1
    clock.t = 61.0
    obs.expire()
    assert quotas.sensor_count == 0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        PrometheusObserver(entity_expiry_seconds=0, process_metrics=False)
    with pytest.raises(ValueError):
        PrometheusObserver(max_entities=0, process_metrics=False)


def test_upstream_anomalies_are_counted_by_kind() -> None:
    obs, _ = make()
    assert value(obs, "kqp_upstream_anomalies_total", kind="unawaited") == 0   # present from the start
    obs.upstream_anomaly("unawaited")
    obs.upstream_anomaly("unawaited")
    obs.upstream_anomaly("unreadable")
    assert value(obs, "kqp_upstream_anomalies_total", kind="unawaited") == 2
    assert value(obs, "kqp_upstream_anomalies_total", kind="unreadable") == 1


def test_observed_throttles_count_apart_and_observed_quotas_and_pools_are_marked() -> None:
    from kqp.quotas.pools.spec import MemberSelector, PoolSpec

    obs, clock = make()
    spec = EntitySpec(None, "metered")
    pool = PoolSpec("ingest", {"consumer_byte_rate": 1000.0}, (MemberSelector(client_id="free"),), mode="observe")
    quotas = bound(clock, QuotaSettings(entities={spec: {"producer_byte_rate": 100.0}}, modes={spec: "observe"},
                                        pools=(pool,)), obs)
    obs.request(METERED, ApiKey.Produce, 1100)
    quotas.record_fetch(FREE, 10, 0, 0, 0.0)
    obs.observed_throttled(METERED, "producer_byte_rate", 2.5)   # would have been muted 0-2.5 s
    clock.t = 1.0
    obs.observed_throttled(METERED, "producer_byte_rate", 0.5)   # 1-1.5 s: inside that mute already
    who = {"user": "ANONYMOUS", "client_id": "metered"}
    # Counted as the would-be mute passes: 1 s of it by now, however many requests overlap.
    assert value(obs, "kqp_observed_muted_seconds_total", quota="producer_byte_rate", **who) == 1.0
    clock.t = 10.0
    assert value(obs, "kqp_observed_muted_seconds_total", quota="producer_byte_rate", **who) == 2.5
    obs.observed_throttled(METERED, "producer_byte_rate", 1.0)   # 10-11 s: the gap is not counted
    clock.t = 20.0
    assert value(obs, "kqp_observed_muted_seconds_total", quota="producer_byte_rate", **who) == 3.5
    assert value(obs, "kqp_observed_throttled_requests_total", quota="producer_byte_rate", **who) == 3
    assert value(obs, "kqp_throttle_seconds_total", quota="producer_byte_rate", **who) is None   # nothing told
    assert value(obs, "kqp_quota_observed", quota="producer_byte_rate", **who) == 1
    assert value(obs, "kqp_pool_observed", pool="ingest", quota="consumer_byte_rate") == 1
    assert obs.recent_observed.summary(METERED, 20.0, 300)["producer_byte_rate"]["count"] == 3
    assert not obs.recent.summary(METERED, 20.0, 300)


def test_an_entity_observed_over_its_quota_counts_at_most_a_second_a_second() -> None:
    """Ten requests a second, each of which enforcing would have throttled for a span (11 s): over
    60 s the entity would have been muted 60 s, not the 6,600 s the throttles add up to."""
    obs, clock = make()
    who = {"user": "ANONYMOUS", "client_id": "metered"}
    for step in range(600):
        clock.t = step / 10
        obs.observed_throttled(METERED, "producer_byte_rate", 11.0)
    clock.t = 60.0
    assert value(obs, "kqp_observed_muted_seconds_total", quota="producer_byte_rate", **who) == pytest.approx(60.0)
    assert value(obs, "kqp_observed_throttled_requests_total", quota="producer_byte_rate", **who) == 600


def test_bytes_per_topic_only_when_asked_and_bounded() -> None:
    clock = Clock()
    obs = PrometheusObserver(entity_expiry_seconds=60, max_entities=3, clock=clock, process_metrics=False,
                             topic_bytes=True)
    obs.topic_bytes(METERED, "produce", (("a", 100), ("b", 50)))
    obs.topic_bytes(METERED, "produce", (("a", 1),))
    obs.topic_bytes(FREE, "fetch", (("a", 7), ("c", 9), ("d", 3)))   # the 4th and 5th pairs: past the cap
    who = {"user": "ANONYMOUS", "client_id": "metered"}
    assert value(obs, "kqp_topic_bytes_total", direction="produce", topic="a", **who) == 101
    free = {"user": "ANONYMOUS", "client_id": "free"}
    assert value(obs, "kqp_topic_bytes_total", direction="fetch", topic="a", **free) == 7
    assert value(obs, "kqp_topic_bytes_total", direction="fetch", topic=OTHER, **free) == 12
    assert value(obs, "kqp_topic_bytes_total", direction="fetch", topic="c", **free) is None
    clock.t = 61.0
    obs.expire()
    obs.topic_bytes(FREE, "fetch", (("e", 1),))   # expiry freed the room
    assert value(obs, "kqp_topic_bytes_total", direction="fetch", topic="e", **free) == 1
    assert "kqp_topic_bytes" not in series_names(make()[0]), "no such family unless asked for"
