"""The quotas section on its own, as live reload reads it."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kqp.config import ConfigError, quota_settings_from
from kqp.config.quota_section import quota_document
from kqp.quotas.model import ALGORITHMS, DEFAULT, QUOTA_TYPES, TOKEN_BUCKET, EntitySpec, QuotaSettings


def test_empty_section_is_the_kafka_defaults() -> None:
    settings = quota_settings_from(None)
    assert isinstance(settings, QuotaSettings)
    assert (settings.window_size_seconds, settings.window_count, dict(settings.entities)) == (1.0, 11, {})


def test_windows_and_every_quota_type() -> None:
    entry = {"user": "svc", "client_id": DEFAULT, **{name: i + 1 for i, name in enumerate(QUOTA_TYPES)}}
    settings = quota_settings_from({"window_size_seconds": 0.2, "window_count": 2, "entities": [entry]})
    assert (settings.window_size_seconds, settings.window_count) == (0.2, 2)
    values = settings.entities[EntitySpec(user="svc", client_id="<default>")]
    assert list(values) == list(QUOTA_TYPES)
    assert all(isinstance(v, float) for v in values.values())
    assert values["request_percentage"] == QUOTA_TYPES.index("request_percentage") + 1


def test_zero_blocks_and_request_percentage_may_exceed_100() -> None:
    settings = quota_settings_from({"entities": [{"user": "u", "producer_byte_rate": 0, "request_percentage": 250.5}]})
    assert dict(settings.entities[EntitySpec(user="u", client_id=None)]) == {
        "producer_byte_rate": 0.0,
        "request_percentage": 250.5,
    }


def test_entity_forms_stay_distinct() -> None:
    # /clients/c and /users/<default>/clients/c are different quota nodes in Kafka.
    settings = quota_settings_from(
        {
            "entities": [
                {"client_id": "c", "request_rate": 1},
                {"user": "<default>", "client_id": "c", "request_rate": 2},
                {"user": "<default>", "request_rate": 3},
            ]
        }
    )
    assert list(settings.entities) == [
        EntitySpec(user=None, client_id="c"),
        EntitySpec(user="<default>", client_id="c"),
        EntitySpec(user="<default>", client_id=None),
    ]


def test_errors_carry_path_and_source() -> None:
    with pytest.raises(ConfigError) as info:
        quota_settings_from({"entities": [{"user": "a"}]}, source="kqp.yaml")
    assert str(info.value) == (
        "config error in kqp.yaml: quotas.entities[0]: sets no quota; add one, e.g. producer_byte_rate: 1048576"
    )
    with pytest.raises(ConfigError) as info:
        quota_settings_from({"window_count": 0}, path="tenants.a.quotas")
    assert str(info.value) == "config error: tenants.a.quotas.window_count: must be an integer >= 2, got 0"


names = st.sampled_from(["alice", "bob", DEFAULT, "spark-writer", "ANONYMOUS"])
entries = st.fixed_dictionaries(
    {},
    optional={
        "user": names,
        "client_id": names,
        "client_id_prefix": st.sampled_from(["spark-", "spark-job-42-"]),
        "algorithm": st.sampled_from(ALGORITHMS),
    },
).flatmap(
    lambda ids: st.dictionaries(st.sampled_from(QUOTA_TYPES), st.floats(min_value=0.5, max_value=1e12), min_size=1).map(
        lambda values: {**ids, **values}
    )
)


@given(
    st.lists(entries, max_size=6),
    st.floats(min_value=0.01, max_value=60),
    st.integers(min_value=2, max_value=100),
    st.sampled_from(ALGORITHMS),
)
def test_valid_sections_round_trip(entities: list[dict], window: float, count: int, algorithm: str) -> None:
    data = {"window_size_seconds": window, "window_count": count, "entities": entities, "algorithm": algorithm}
    try:
        settings = quota_settings_from(data)
    except ConfigError as exc:
        # Only the refusals these generated entries can earn.
        assert any(m in exc.message for m in ("needs a user, a client_id or both", "same entity",
                                              "has both client_id and client_id_prefix"))
        return
    assert quota_settings_from(quota_document(settings)) == settings
    assert len(settings.entities) == len(entities)


def test_prefix_entries_and_algorithms() -> None:
    settings = quota_settings_from({"algorithm": "token_bucket", "entities": [
        {"client_id_prefix": "spark-job-42-", "producer_byte_rate": 100},
        {"user": "alice", "client_id_prefix": "spark-job-42-", "algorithm": "sampled", "producer_byte_rate": 50},
        {"client_id": "spark-job-42-", "producer_byte_rate": 10},   # the exact client id: another entity
    ]})
    group, alice_group, exact = list(settings.entities)
    assert (group.path, alice_group.path, exact.path) == (
        "/client-id-prefixes/spark-job-42-", "/users/alice/client-id-prefixes/spark-job-42-",
        "/clients/spark-job-42-")
    assert settings.algorithm == TOKEN_BUCKET
    assert [settings.algorithm_for(e) for e in (group, alice_group, exact)] == [TOKEN_BUCKET, "sampled", TOKEN_BUCKET]


@pytest.mark.parametrize(("section", "message"), [
    ({"entities": [{"client_id": "c", "client_id_prefix": "c-", "request_rate": 1}]},
     "quotas.entities[0]: has both client_id and client_id_prefix; an entry names one client id or one prefix "
     "group (write two entries for both)"),
    ({"entities": [{"client_id_prefix": "<default>", "request_rate": 1}]},
     "quotas.entities[0].client_id_prefix: must be a literal prefix; for every client id write client_id: "
     "'<default>'"),
    ({"entities": [{"client_id_prefix": "", "request_rate": 1}]},
     "quotas.entities[0].client_id_prefix: must not be empty"),
    ({"entities": [{"client_id": "c", "algorithm": "leaky", "request_rate": 1}]},
     "quotas.entities[0].algorithm: must be one of steady, sampled, token_bucket, got 'leaky'"),
    ({"algorithm": "token-bucket"},
     "quotas.algorithm: must be one of steady, sampled, token_bucket, got 'token-bucket'"),
    ({"entities": [{"client_id_prefix": "p", "algoritm": "sampled", "request_rate": 1}]},
     "quotas.entities[0].algoritm: unknown key; did you mean 'algorithm'?"),
])
def test_prefix_and_algorithm_refusals(section: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        quota_settings_from(section)
    assert str(info.value) == f"config error: {message}"


def test_modes_of_the_section_an_entry_and_a_pool_round_trip() -> None:
    section = {"mode": "observe", "entities": [
        {"client_id": "etl", "producer_byte_rate": 100, "mode": "enforce"},
        {"client_id": "<default>", "producer_byte_rate": 50},
    ], "pools": [{"name": "ingest", "producer_byte_rate": 1000, "members": [{"client_id_prefix": "job-"}],
                  "mode": "enforce"}]}
    settings = quota_settings_from(section)
    etl, default = list(settings.entities)
    assert settings.mode == "observe" and dict(settings.modes) == {etl: "enforce"}
    assert not settings.observes(etl) and settings.observes(default)     # the entry's own mode wins
    assert not settings.observes_pool(settings.pools[0])
    assert quota_settings_from(quota_document(settings)) == settings
    assert quota_settings_from(None).mode == "enforce"


@pytest.mark.parametrize(("section", "where", "what"), [
    ({"mode": "dry-run"}, "quotas.mode", "must be one of"),
    ({"entities": [{"client_id": "a", "producer_byte_rate": 1, "mode": "shadow"}]}, "quotas.entities[0].mode",
     "must be one of"),
    ({"entities": [{"client_id": "a", "mode": "observe", "weight": 2}],
      "pools": [{"name": "p", "producer_byte_rate": 1, "members": [{"client_id": "a"}]}]},
     "quotas.entities[0].mode", "sets none"),
    ({"pools": [{"name": "p", "producer_byte_rate": 1, "members": [{"client_id": "a"}], "mode": 1}]},
     "quotas.pools[0].mode", "must be one of"),
])
def test_a_wrong_mode_is_one_line_naming_its_key(section: dict, where: str, what: str) -> None:
    with pytest.raises(ConfigError) as caught:
        quota_settings_from(section)
    assert caught.value.key == where and what in caught.value.message
