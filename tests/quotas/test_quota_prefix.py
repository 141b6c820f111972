"""Client-id prefix entities: where they sit in Kafka's precedence, their group keys, reload survival.

The order under test (entities.py), most specific first:
    1 /users/u/clients/c  1p /users/u/client-id-prefixes/p  2 /users/u/clients/<default>  3 /users/u
    4 /users/<default>/clients/c  4p /users/<default>/client-id-prefixes/p  5 .../<default>  6 /users/<default>
    7 /clients/c  7p /client-id-prefixes/p  8 /clients/<default>
"""

from __future__ import annotations

import pytest

from kqp.quotas.entities import resolutions, resolve, resolve_key, sharing
from kqp.quotas.fleet.ledger import sensor_name
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import DEFAULT, EntitySpec, Principal, QuotaKey, QuotaSettings

P = "spark-job-42-"
EXEC1 = Principal("alice", "spark-job-42-1")
T = "producer_byte_rate"


def prefix(user: str | None, p: str = P) -> EntitySpec:
    return EntitySpec(user, None, p)


# Eleven levels, each with a distinct limit (its rank) and the key alice/spark-job-42-1 gets there.
LEVELS = [
    (EntitySpec("alice", "spark-job-42-1"), QuotaKey("alice", "spark-job-42-1")),
    (prefix("alice"), QuotaKey("alice", "", P)),
    (EntitySpec("alice", DEFAULT), QuotaKey("alice", "spark-job-42-1")),
    (EntitySpec("alice", None), QuotaKey("alice", "")),
    (EntitySpec(DEFAULT, "spark-job-42-1"), QuotaKey("alice", "spark-job-42-1")),
    (prefix(DEFAULT), QuotaKey("alice", "", P)),
    (EntitySpec(DEFAULT, DEFAULT), QuotaKey("alice", "spark-job-42-1")),
    (EntitySpec(DEFAULT, None), QuotaKey("alice", "")),
    (EntitySpec(None, "spark-job-42-1"), QuotaKey("", "spark-job-42-1")),
    (prefix(None), QuotaKey("", "", P)),
    (EntitySpec(None, DEFAULT), QuotaKey("", "spark-job-42-1")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_each_level_wins_over_all_less_specific_ones(level: int) -> None:
    s = QuotaSettings(entities={spec: {T: float(i)} for i, (spec, _) in enumerate(LEVELS) if i >= level})
    spec, key = LEVELS[level]
    assert resolve(s, T, EXEC1) == (key, float(level))
    assert resolutions(s, EXEC1)[T].entity == spec


def test_executors_share_one_group_key_and_an_exact_entry_takes_one_out() -> None:
    s = QuotaSettings(entities={prefix(None): {T: 100.0}, EntitySpec(None, "spark-job-42-3"): {T: 50.0}})
    group = QuotaKey("", "", P)
    assert resolve(s, T, Principal("alice", "spark-job-42-1")) == (group, 100.0)
    assert resolve(s, T, Principal("bob", "spark-job-42-2")) == (group, 100.0)   # 7p: every user
    assert resolve(s, T, Principal("alice", "spark-job-42-3")) == (QuotaKey("", "spark-job-42-3"), 50.0)
    assert resolve(s, T, Principal("alice", "spark-job-4")) is None      # shorter than the prefix
    assert resolve(s, T, Principal("alice", "")) is None                 # an empty client id names no group
    assert sharing(prefix(None)) == "client-id-prefix"


def test_longest_prefix_wins_and_each_quota_type_resolves_on_its_own() -> None:
    s = QuotaSettings(entities={
        prefix(None, "spark-"): {T: 10.0, "request_rate": 5.0},
        prefix(None, "spark-job-"): {T: 20.0},
        prefix(None, P): {T: 30.0},
        prefix(None, "spark-job-43-"): {T: 40.0},
    })
    assert resolve(s, T, EXEC1) == (QuotaKey("", "", P), 30.0)
    assert resolve(s, T, Principal("a", "spark-job-7")) == (QuotaKey("", "", "spark-job-"), 20.0)
    assert resolve(s, T, Principal("a", "spark-x")) == (QuotaKey("", "", "spark-"), 10.0)
    # request_rate is set only on the shortest prefix: the longer ones do not match for it.
    assert resolve(s, "request_rate", EXEC1) == (QuotaKey("", "", "spark-"), 5.0)
    # One probe per distinct length, longest first: 13 ("spark-job-42-" and "spark-job-43-"), 10, 6.
    assert s.prefixes[None][0] == (13, 10, 6)


def test_a_named_users_levels_come_before_a_default_users_prefix() -> None:
    # /users/alice (3) is above /users/<default>/client-id-prefixes/p (4p), as Kafka keeps every
    # named-user level above every <default>-user level.
    s = QuotaSettings(entities={EntitySpec("alice", None): {T: 3.0}, prefix(DEFAULT): {T: 4.0}})
    assert resolve(s, T, EXEC1) == (QuotaKey("alice", ""), 3.0)
    # 4p gives each user their own group: bob's executors do not share alice's quota.
    assert resolve(s, T, Principal("bob", "spark-job-42-1")) == (QuotaKey("bob", "", P), 4.0)


def test_a_group_key_cannot_collide_with_any_client_id() -> None:
    group = QuotaKey("", "", P)
    # A client whose id is literally the prefix is a member, charged to the group, not a key of its own.
    s = QuotaSettings(entities={prefix(None): {T: 1.0}})
    assert resolve(s, T, Principal("u", P)) == (group, 1.0)
    names = {sensor_name(T, QuotaKey("", c)) for c in (P, f"prefix={P}", f"prefix%3D{P}", "")}
    assert sensor_name(T, group) not in names


def test_reload_keeps_a_group_sensor_while_the_group_still_resolves_to_it() -> None:
    m = QuotaManager(QuotaSettings(entities={prefix("alice"): {T: 1000.0}}), now=0.0)
    m.record_produce(EXEC1, 5000, 1, 1, 0.0)
    group = QuotaKey("alice", "", P)
    # An exact entry for one executor takes that executor out; the group and its samples stay.
    m.update_settings(QuotaSettings(entities={prefix("alice"): {T: 400.0},
                                              EntitySpec("alice", "spark-job-42-1"): {T: 9.0}}), 1.0)
    [state] = m.snapshot(1.0)
    assert (state.key, state.limit) == (group, 400.0)
    assert state.rate == pytest.approx(5000 / 10.0)   # 5000 B over W = 10 s (11 windows of 1 s, 1 s in)
    # A shorter prefix at the same level takes the whole group: the old group sensor is released.
    lines = m.update_settings(QuotaSettings(entities={prefix("alice", "spark-"): {T: 400.0}}), 2.0)
    assert m.sensor_count == 0 and lines[-1] == "released 1 sensor(s) whose quota no longer applies"


def test_reload_releases_a_default_user_group_that_a_user_level_now_takes_whole() -> None:
    m = QuotaManager(QuotaSettings(entities={prefix(DEFAULT): {T: 1000.0}}), now=0.0)
    m.record_produce(EXEC1, 1, 1, 1, 0.0)
    assert resolve_key(m.settings, T, QuotaKey("alice", "", P)) is not None
    # /users/alice/clients/<default> (2) beats 4p for every client of alice.
    m.update_settings(QuotaSettings(entities={prefix(DEFAULT): {T: 1000.0},
                                              EntitySpec("alice", DEFAULT): {T: 5.0}}), 1.0)
    assert m.sensor_count == 0
    # Without a user (7p) only the prefix entity itself keeps the group.
    s = QuotaSettings(entities={prefix(None): {T: 1.0}, EntitySpec(DEFAULT, None): {T: 2.0}})
    assert resolve_key(s, T, QuotaKey("", "", P)) is not None
    assert resolve_key(QuotaSettings(entities={EntitySpec(None, DEFAULT): {T: 2.0}}), T,
                       QuotaKey("", "", P)) is None


@pytest.mark.parametrize("kwargs", [
    {"user": None, "client_id": "c", "client_id_prefix": "p"},
    {"user": None, "client_id": None, "client_id_prefix": ""},
    {"user": "u", "client_id": None, "client_id_prefix": DEFAULT},
])
def test_malformed_prefix_entities_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        EntitySpec(**kwargs)


def test_paths() -> None:
    assert prefix("alice").path == "/users/alice/client-id-prefixes/spark-job-42-"
    assert prefix(None).path == "/client-id-prefixes/spark-job-42-"


def test_an_empty_user_still_reaches_the_default_user_levels() -> None:
    # An empty user names no entity, so only its own levels (1, 1p, 2, 3) are skipped.
    s = QuotaSettings(entities={EntitySpec(DEFAULT, None): {T: 6.0}, prefix(DEFAULT): {"request_rate": 4.0}})
    assert resolve(s, T, Principal("", "x")) == (QuotaKey("", ""), 6.0)
    assert resolve(s, T, Principal("", "")) == (QuotaKey("", ""), 6.0)
    assert resolve(s, "request_rate", Principal("", "spark-job-42-9")) == (QuotaKey("", "", P), 4.0)


def test_an_empty_user_s_default_user_group_survives_an_unrelated_reload() -> None:
    # User "" reaches /users/<default>/client-id-prefixes/P (4p) with the key ("", "", P), the same
    # key as the all-users group 7p: re-resolving that key must find 4p too, not release the sensor.
    m = QuotaManager(QuotaSettings(entities={prefix(DEFAULT): {T: 1000.0}}), now=0.0)
    m.record_produce(Principal("", "spark-job-42-9"), 5000, 1, 1, 0.0)
    lines = m.update_settings(QuotaSettings(entities={prefix(DEFAULT): {T: 1000.0},
                                                      EntitySpec("bob", None): {T: 5.0}}), 1.0)
    assert not any("released" in line for line in lines)
    [state] = m.snapshot(1.0)
    assert (state.key, state.limit) == (QuotaKey("", "", P), 1000.0)
    assert state.rate == pytest.approx(5000 / 10.0)   # its samples kept: W = 10 s
