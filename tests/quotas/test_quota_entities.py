"""Entity resolution: Kafka's eight levels, per quota type, metric-key sharing and the cache."""

from __future__ import annotations

import pytest

from kqp.quotas import entities
from kqp.quotas.entities import resolutions, resolve, resolve_key, sharing
from kqp.quotas.model import ANONYMOUS, DEFAULT, EntitySpec, Principal, QuotaKey, QuotaSettings

ALICE_APP = Principal("alice", "app")

# The eight levels, most specific first, each with a distinct limit (its level number) and the
# key Kafka's DefaultQuotaCallback.quotaMetricTags gives alice/app at that level.
LEVELS = [
    (EntitySpec("alice", "app"), 1.0, QuotaKey("alice", "app")),
    (EntitySpec("alice", DEFAULT), 2.0, QuotaKey("alice", "app")),
    (EntitySpec("alice", None), 3.0, QuotaKey("alice", "")),
    (EntitySpec(DEFAULT, "app"), 4.0, QuotaKey("alice", "app")),
    (EntitySpec(DEFAULT, DEFAULT), 5.0, QuotaKey("alice", "app")),
    (EntitySpec(DEFAULT, None), 6.0, QuotaKey("alice", "")),
    (EntitySpec(None, "app"), 7.0, QuotaKey("", "app")),
    (EntitySpec(None, DEFAULT), 8.0, QuotaKey("", "app")),
]


def settings_of(entities: dict, **kw: float) -> QuotaSettings:
    return QuotaSettings(entities=entities, **kw)


@pytest.mark.parametrize("level", range(8))
def test_each_level_wins_over_all_less_specific_ones(level: int) -> None:
    # Configure this level and every less specific one: this level must win.
    configured = {spec: {"producer_byte_rate": limit} for spec, limit, _ in LEVELS[level:]}
    spec, limit, key = LEVELS[level]
    s = settings_of(configured)
    assert resolve(s, "producer_byte_rate", ALICE_APP) == (key, limit)
    assert resolutions(s, ALICE_APP)["producer_byte_rate"].entity == spec


def test_levels_that_name_someone_else_do_not_match() -> None:
    s = settings_of({
        EntitySpec("bob", "app"): {"producer_byte_rate": 1.0},
        EntitySpec("bob", None): {"producer_byte_rate": 2.0},
        EntitySpec(DEFAULT, "other"): {"producer_byte_rate": 3.0},
        EntitySpec(None, "other"): {"producer_byte_rate": 4.0},
    })
    assert resolve(s, "producer_byte_rate", ALICE_APP) is None


def test_user_level_beats_default_user_with_exact_client() -> None:
    # Kafka's order puts /users/alice (3) above /users/<default>/clients/app (4).
    s = settings_of({
        EntitySpec("alice", None): {"consumer_byte_rate": 3.0},
        EntitySpec(DEFAULT, "app"): {"consumer_byte_rate": 4.0},
    })
    assert resolve(s, "consumer_byte_rate", ALICE_APP) == (QuotaKey("alice", ""), 3.0)
    assert resolve(s, "consumer_byte_rate", Principal("bob", "app")) == (QuotaKey("bob", "app"), 4.0)


def test_each_quota_type_resolves_on_its_own() -> None:
    # The most specific entity sets only consumer_byte_rate: producer falls through to /users/alice.
    s = settings_of({
        EntitySpec("alice", "app"): {"consumer_byte_rate": 100.0},
        EntitySpec("alice", None): {"producer_byte_rate": 200.0},
        EntitySpec(None, DEFAULT): {"request_percentage": 50.0},
    })
    assert resolve(s, "consumer_byte_rate", ALICE_APP) == (QuotaKey("alice", "app"), 100.0)
    assert resolve(s, "producer_byte_rate", ALICE_APP) == (QuotaKey("alice", ""), 200.0)
    assert resolve(s, "request_percentage", ALICE_APP) == (QuotaKey("", "app"), 50.0)
    assert resolve(s, "request_rate", ALICE_APP) is None


def test_metric_keys_per_client_for_user_client_default() -> None:
    # /users/alice/clients/<default>: each of alice's clients has its own sensor.
    s = settings_of({EntitySpec("alice", DEFAULT): {"producer_byte_rate": 10.0}})
    a = resolve(s, "producer_byte_rate", Principal("alice", "a"))
    b = resolve(s, "producer_byte_rate", Principal("alice", "b"))
    assert a == (QuotaKey("alice", "a"), 10.0)
    assert b == (QuotaKey("alice", "b"), 10.0)


def test_metric_keys_shared_by_clients_for_user_level() -> None:
    # /users/alice: all of alice's clients share one sensor (client id tag "").
    s = settings_of({EntitySpec("alice", None): {"producer_byte_rate": 10.0}})
    a = resolve(s, "producer_byte_rate", Principal("alice", "a"))
    b = resolve(s, "producer_byte_rate", Principal("alice", "b"))
    assert a == b == (QuotaKey("alice", ""), 10.0)


def test_metric_keys_shared_by_users_for_client_level() -> None:
    # /clients/<default>: one sensor per client id, shared by every user (user tag "").
    s = settings_of({EntitySpec(None, DEFAULT): {"producer_byte_rate": 10.0}})
    assert resolve(s, "producer_byte_rate", Principal("alice", "c")) == (QuotaKey("", "c"), 10.0)
    assert resolve(s, "producer_byte_rate", Principal(ANONYMOUS, "c")) == (QuotaKey("", "c"), 10.0)
    assert resolve(s, "producer_byte_rate", Principal("alice", "d")) == (QuotaKey("", "d"), 10.0)


def test_default_user_level_gives_each_user_one_sensor() -> None:
    s = settings_of({EntitySpec(DEFAULT, None): {"request_rate": 5.0}})
    assert resolve(s, "request_rate", Principal(ANONYMOUS, "x")) == (QuotaKey(ANONYMOUS, ""), 5.0)
    assert resolve(s, "request_rate", Principal("bob", "y")) == (QuotaKey("bob", ""), 5.0)


# An empty client id (a null one too: Kafka's RequestHeader.parse turns null into "") goes
# through two steps in Kafka's DefaultQuotaCallback. quotaMetricTags walks the eight levels by which
# entities exist and stops with tags (alice, "") at levels 2, 3, 5 and 6, or ("", "") at 7 and 8
# (levels 1 and 4 would need an entity named "", which cannot be configured). quotaLimit then
# reads the limit from the tags alone: a non-empty user and an empty client id look up
# /users/alice, then /users/<default>; empty tags look up nothing.
ALICE_NO_ID = Principal("alice", "")


def test_empty_client_id_is_not_under_clients_default() -> None:
    # quotaMetricTags reaches levels 7/8 with tags ("", ""); quotaLimit has no branch for empty
    # tags, so the quota is null: /clients/<default> does not apply.
    s = settings_of({EntitySpec(None, DEFAULT): {"producer_byte_rate": 10.0}})
    assert resolve(s, "producer_byte_rate", ALICE_NO_ID) is None
    assert resolve(s, "producer_byte_rate", Principal(ANONYMOUS, "")) is None
    # ...while any named client id still falls under it, one sensor per client id.
    assert resolve(s, "producer_byte_rate", Principal("alice", "x")) == (QuotaKey("", "x"), 10.0)


def test_user_clients_default_alone_gives_an_empty_client_id_no_quota() -> None:
    # /users/alice/clients/<default> is level 2: quotaMetricTags stops there with (alice, ""), and
    # quotaLimit(alice, "") looks up /users/alice and /users/<default>, neither configured: null.
    s = settings_of({
        EntitySpec("alice", DEFAULT): {"producer_byte_rate": 10.0},
        EntitySpec(None, DEFAULT): {"producer_byte_rate": 8.0},
    })
    assert resolve(s, "producer_byte_rate", ALICE_NO_ID) is None
    assert resolve(s, "producer_byte_rate", ALICE_APP) == (QuotaKey("alice", "app"), 10.0)


@pytest.mark.parametrize("client_default", [EntitySpec("alice", DEFAULT), EntitySpec(DEFAULT, DEFAULT)])
def test_empty_client_id_falls_back_to_the_user_levels(client_default: EntitySpec) -> None:
    # Level 2 or 5 stops the walk with tags (alice, ""); the limit comes from /users/alice ...
    s = settings_of({
        client_default: {"producer_byte_rate": 10.0},
        EntitySpec("alice", None): {"producer_byte_rate": 3.0},
        EntitySpec(DEFAULT, None): {"producer_byte_rate": 6.0},
    })
    found = resolutions(s, ALICE_NO_ID)["producer_byte_rate"]
    assert (found.key, found.limit, found.entity) == (QuotaKey("alice", ""), 3.0, EntitySpec("alice", None))
    # ... else from /users/<default>, still on alice's own (alice, "") sensor.
    s = settings_of({
        client_default: {"producer_byte_rate": 10.0},
        EntitySpec(DEFAULT, None): {"producer_byte_rate": 6.0},
    })
    found = resolutions(s, ALICE_NO_ID)["producer_byte_rate"]
    assert (found.key, found.limit, found.entity) == (QuotaKey("alice", ""), 6.0, EntitySpec(DEFAULT, None))


def test_empty_client_id_with_every_level_configured_takes_users_alice() -> None:
    # All eight levels (as in LEVELS, limit = level number): the walk stops at level 2 with tags
    # (alice, "") and quotaLimit answers /users/alice, level 3.
    s = settings_of({spec: {"producer_byte_rate": limit} for spec, limit, _ in LEVELS})
    assert resolve(s, "producer_byte_rate", ALICE_NO_ID) == (QuotaKey("alice", ""), 3.0)


def test_empty_client_id_shares_the_users_sensor() -> None:
    # Under /users/alice every client of alice, the nameless one included, is tagged (alice, "").
    s = settings_of({EntitySpec("alice", None): {"producer_byte_rate": 10.0}})
    assert resolve(s, "producer_byte_rate", ALICE_NO_ID) == resolve(s, "producer_byte_rate", ALICE_APP)
    assert resolve(s, "producer_byte_rate", ALICE_APP) == (QuotaKey("alice", ""), 10.0)


def test_resolve_key_reads_empty_client_tags_as_quota_limit_does() -> None:
    s = settings_of({
        EntitySpec("alice", DEFAULT): {"producer_byte_rate": 10.0},
        EntitySpec(None, DEFAULT): {"producer_byte_rate": 8.0},
    })
    # (alice, ""): /users/alice, then /users/<default>; neither is configured.
    assert resolve_key(s, "producer_byte_rate", QuotaKey("alice", "")) is None
    # ("", ""): quotaLimit finds nothing for empty tags, /clients/<default> notwithstanding.
    assert resolve_key(s, "producer_byte_rate", QuotaKey("", "")) is None
    s = settings_of({EntitySpec("alice", DEFAULT): {"producer_byte_rate": 10.0},
                     EntitySpec(DEFAULT, None): {"producer_byte_rate": 6.0}})
    found = resolve_key(s, "producer_byte_rate", QuotaKey("alice", ""))
    assert found is not None and (found.limit, found.entity) == (6.0, EntitySpec(DEFAULT, None))


def test_cache_is_filled_and_new_settings_start_empty() -> None:
    s1 = settings_of({EntitySpec("alice", None): {"producer_byte_rate": 10.0}})
    assert resolve(s1, "producer_byte_rate", ALICE_APP) == (QuotaKey("alice", ""), 10.0)
    assert ALICE_APP in s1.resolution_cache
    s2 = settings_of({EntitySpec("alice", None): {"producer_byte_rate": 20.0}})
    assert s2.resolution_cache == {}
    assert resolve(s2, "producer_byte_rate", ALICE_APP) == (QuotaKey("alice", ""), 20.0)
    # The old instance keeps answering from its own cache; nothing leaked between them.
    assert resolve(s1, "producer_byte_rate", ALICE_APP) == (QuotaKey("alice", ""), 10.0)


def test_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entities, "MAX_CACHED_PRINCIPALS", 3)
    s = settings_of({EntitySpec(None, DEFAULT): {"producer_byte_rate": 10.0}})
    for i in range(10):
        assert resolve(s, "producer_byte_rate", Principal("u", f"c{i}")) == (QuotaKey("", f"c{i}"), 10.0)
        assert len(s.resolution_cache) <= 3


def test_resolve_key_follows_kafka_tags() -> None:
    s = settings_of({
        EntitySpec("alice", None): {"producer_byte_rate": 3.0},
        EntitySpec(None, DEFAULT): {"producer_byte_rate": 8.0},
    })
    assert resolve_key(s, "producer_byte_rate", QuotaKey("alice", "")).limit == 3.0
    assert resolve_key(s, "producer_byte_rate", QuotaKey("", "anything")).limit == 8.0
    # alice/app now charges (alice, "") rather than (alice, app): that per-client key is gone.
    assert resolve_key(s, "producer_byte_rate", QuotaKey("alice", "app")) is None
    assert resolve_key(s, "consumer_byte_rate", QuotaKey("alice", "")) is None


def test_entity_spec_validation_and_path() -> None:
    with pytest.raises(ValueError):
        EntitySpec(None, None)
    with pytest.raises(ValueError):
        EntitySpec("", "app")
    assert EntitySpec("alice", DEFAULT).path == "/users/alice/clients/<default>"
    assert EntitySpec(None, "app").path == "/clients/app"
    assert EntitySpec(DEFAULT, None).path == "/users/<default>"


@pytest.mark.parametrize("values, kw", [
    ({"producer_byte_rate": -1.0}, {}),
    ({"producer_byte_rate": float("inf")}, {}),
    ({"bogus_rate": 1.0}, {}),
    ({"producer_byte_rate": 1.0}, {"window_size_seconds": 0.0}),
    ({"producer_byte_rate": 1.0}, {"window_count": 0}),
])
def test_settings_validation(values: dict, kw: dict) -> None:
    with pytest.raises(ValueError):
        QuotaSettings(entities={EntitySpec("a", None): values}, **kw)


def test_settings_are_frozen_and_indexed() -> None:
    raw = {EntitySpec("a", None): {"producer_byte_rate": 1, "request_rate": 2.5}}
    s = QuotaSettings(entities=raw)
    raw[EntitySpec("b", None)] = {"producer_byte_rate": 1.0}  # later edits to the input do not leak
    assert list(s.entities) == [EntitySpec("a", None)]
    with pytest.raises(TypeError):
        s.entities[EntitySpec("c", None)] = {}  # type: ignore[index]
    assert s.quota_types == {"producer_byte_rate", "request_rate"}
    assert s.by_type["request_rate"] == {EntitySpec("a", None): 2.5}
    assert s.enabled and not QuotaSettings().enabled
    assert QuotaSettings(entities=raw) != s and QuotaSettings(entities=dict(s.entities)) == s


def test_sharing_names_how_an_entity_keys_its_sensor() -> None:
    assert [sharing(e) for e in (EntitySpec("a", None), EntitySpec(None, "c"), EntitySpec("a", "c"))] == [
        "user", "client-id", "client"]


def test_each_quota_type_carries_the_mode_of_the_level_it_resolved_at() -> None:
    # Some types resolve at an observed level, the others at an enforced one: the mode is read once
    # per level found, and each type must still carry its own level's.
    observed, enforced = EntitySpec("alice", None), EntitySpec(DEFAULT, DEFAULT)
    s = QuotaSettings(entities={observed: {"producer_byte_rate": 1.0, "request_rate": 3.0},
                                enforced: {"consumer_byte_rate": 2.0, "request_rate": 4.0,
                                           "controller_mutation_rate": 5.0}},
                      modes={observed: "observe"})
    found = resolutions(s, ALICE_APP)
    assert {t: (r.entity, r.observed) for t, r in found.items()} == {
        "producer_byte_rate": (observed, True), "request_rate": (observed, True),
        "consumer_byte_rate": (enforced, False), "controller_mutation_rate": (enforced, False)}
    assert [(r.entity, r.observed) for r in resolutions(s, Principal("bob", "app")).values()] == [
        (enforced, False)] * 3   # the shared default levels are the same entity for every principal
