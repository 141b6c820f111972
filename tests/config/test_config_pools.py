"""`quotas.pools` and the pool keys of entity entries (config/pool_section.py): what loads, what the
refusals say, and the round trip through `quota_document`."""

from __future__ import annotations

import pytest
import yaml
from helpers.pool_config import issue_pool
from hypothesis import given
from hypothesis import strategies as st

from kqp.config import ConfigError, quota_settings_from
from kqp.config.quota_section import quota_document
from kqp.quotas.model import EntitySpec, QuotaType
from kqp.quotas.pools.spec import AdaptiveSpec, MemberSelector, MemberShare, PoolSpec


def test_the_issue_config_loads_as_written() -> None:
    settings = quota_settings_from(issue_pool())
    assert settings.entities == {}   # no entity sets a quota of its own: they only name members
    assert settings.shares == {
        EntitySpec(None, None, "job-a-"): MemberShare(weight=3),
        EntitySpec(None, None, "job-b-"): MemberShare(),
        EntitySpec(None, None, "job-c-"): MemberShare(),
    }
    [pool] = settings.pools
    assert pool == PoolSpec("ingest", {QuotaType.PRODUCER_BYTE_RATE: 300000.0},
                            (MemberSelector(client_id_prefix="job-"),))
    assert pool.selects("ANONYMOUS", "job-a-1") and not pool.selects("ANONYMOUS", "other")
    assert quota_settings_from(quota_document(settings)) == settings


def test_every_pool_key_and_share_round_trips() -> None:
    settings = quota_settings_from({"entities": [
        {"user": "alice", "producer_byte_rate": 1000, "weight": 1},       # a quota of its own, and a member
        {"client_id": "svc", "consumer_byte_rate": 5, "min_share": 0.2, "max_share": 0.5},
        {"client_id_prefix": "etl-", "request_rate": 10},                  # a quota only: no share
    ], "pools": [
        {"name": "ingest", "producer_byte_rate": 300000, "request_rate": 50,
         "members": [{"user": "alice"}, {"user": "bob", "client_id_prefix": "job-"}],
         "adaptive": {"target_latency_ms": 100, "min_budget": {"producer_byte_rate": 50000}}},
        {"name": "events", "consumer_byte_rate": 1e6, "topics": ["events", "logs-*"]},
        {"name": "one", "consumer_byte_rate": 10, "members": [{"client_id": "svc"}],
         "adaptive": {"target_latency_ms": 50, "min_budget": 5}},
    ]})
    assert set(settings.shares) == {EntitySpec("alice", None), EntitySpec(None, "svc")}
    assert settings.shares[EntitySpec(None, "svc")] == MemberShare(1.0, 0.2, 0.5)
    ingest, events, one = settings.pools
    assert ingest.adaptive == AdaptiveSpec(100.0, {"producer_byte_rate": 50000.0})
    assert one.adaptive == AdaptiveSpec(50.0, {"consumer_byte_rate": 5.0})
    assert events.members == () and events.covers("logs-eu") and not events.covers("logs")
    assert quota_settings_from(quota_document(settings)) == settings
    assert quota_settings_from(yaml.safe_load(yaml.safe_dump(quota_document(settings)))) == settings


def pools(*entries: dict) -> dict:
    return {"entities": [{"client_id_prefix": "job-a-", "weight": 3}], "pools": list(entries)}


POOL = {"name": "p", "producer_byte_rate": 100, "members": [{"client_id_prefix": "job-"}]}


@pytest.mark.parametrize(("section", "message"), [
    ({"entities": [{"client_id_prefix": "job-a-", "weight": 3}]},
     "quotas.entities[0]: has weight, min_share or max_share, which only pool members have, but quotas.pools "
     "is empty"),
    ({"entities": [{"client_id": "c", "weight": 0}], "pools": [POOL]},
     "quotas.entities[0].weight: must be a positive number (a member's weight in its pools; 0 would starve it), "
     "got 0"),
    ({"entities": [{"client_id": "c", "max_share": 1.5}], "pools": [POOL]},
     "quotas.entities[0].max_share: must be a fraction of the pool's budget, 0..1, got 1.5"),
    ({"entities": [{"client_id": "c", "min_share": 0.6, "max_share": 0.5}], "pools": [POOL]},
     "quotas.entities[0]: need 0 <= min_share <= max_share <= 1, got 0.6 and 0.5"),
    ({"entities": [{"client_id": "c", "wieght": 2}], "pools": [POOL]},
     "quotas.entities[0].wieght: unknown key; did you mean 'weight'?"),
    ({"entities": [{"client_id": "c", "algorithm": "sampled"}], "pools": [POOL]},
     "quotas.entities[0].algorithm: applies to the entry's own quotas, and it sets none (a pool member measures "
     "with quotas.algorithm)"),
    (pools({"name": "p", "members": [{"client_id_prefix": "job-"}]}),
     "quotas.pools[0]: pool p has no budget; give one or more of producer_byte_rate, consumer_byte_rate, "
     "request_rate, producer_record_rate, producer_batch_rate, consumer_record_rate, consumer_batch_rate"),
    (pools({"producer_byte_rate": 1, "members": [{"user": "u"}]}), "quotas.pools[0]: needs a name"),
    (pools({**POOL, "producer_byte_rat": 5}),
     "quotas.pools[0].producer_byte_rat: unknown key; did you mean 'producer_byte_rate'?"),
    (pools({**POOL, "memebrs": []}), "quotas.pools[0].memebrs: unknown key; did you mean 'members'?"),
    (pools({**POOL, "producer_byte_rate": 0}), "quotas.pools[0].producer_byte_rate: must be a positive number, "
                                               "got 0"),
    (pools({**POOL, "request_percentage": 50}),
     "quotas.pools[0].request_percentage: cannot be pooled: it is a share of one kqp event loop's time (KIP-124), "
     "kqp's own CPU and not a capacity of the cluster behind it; use request_rate"),
    (pools({**POOL, "controller_mutation_rate": 5}),
     "quotas.pools[0].controller_mutation_rate: cannot be pooled: KIP-599 admits or refuses each topic from a "
     "token bucket at once; mutations come in rare bursts with no steady demand to divide"),
    (pools({"name": "p", "producer_byte_rate": 1}),
     "quotas.pools[0]: pool p has no members; add members: [{client_id_prefix: ...}] (only a topic pool may "
     "leave them out, to take everyone)"),
    (pools({**POOL, "members": [{}]}),
     "quotas.pools[0].members[0]: selects nothing; give a user, a client_id or a client_id_prefix"),
    (pools({**POOL, "members": []}), "quotas.pools[0].members: must be a non-empty list of member selectors, "
                                     "got a list"),
    (pools({**POOL, "members": [{"client": "x"}]}),
     "quotas.pools[0].members[0].client: unknown key; did you mean 'client_id'?"),
    (pools({**POOL, "members": [{"user": "<default>"}]}),
     "quotas.pools[0].members[0]: a member selector names principals: no empty names and no <default> (omit the "
     "key to select any)"),
    (pools({**POOL, "members": [{"client_id": "a", "client_id_prefix": "a"}]}),
     "quotas.pools[0].members[0]: a member selector has a client_id or a client_id_prefix, not both"),
    (pools({**POOL, "topics": ["events"], "request_rate": 5}),
     "quotas.pools[0].request_rate: a topic pool divides the bytes of its topics: only producer_byte_rate and "
     "consumer_byte_rate (a request's other rates are not per topic)"),
    (pools({**POOL, "topics": ["logs-?"]}),
     "quotas.pools[0].topics[0]: must be a topic name or a pattern with * (letters, digits, . _ - and *; at most "
     "249 characters), got 'logs-?'"),
    (pools({**POOL, "adaptive": {"target_latency": 100}}),
     "quotas.pools[0].adaptive.target_latency: unknown key; did you mean 'target_latency_ms'?"),
    (pools({**POOL, "adaptive": {"min_budget": 5}}),
     "quotas.pools[0].adaptive: needs target_latency_ms, e.g. {target_latency_ms: 100}"),
    (pools({**POOL, "adaptive": {"target_latency_ms": 100, "min_budget": 500}}),
     "quotas.pools[0].adaptive.min_budget: producer_byte_rate floor 500 is above the pool's budget 100"),
    (pools({**POOL, "request_rate": 5, "adaptive": {"target_latency_ms": 100, "min_budget": 1}}),
     "quotas.pools[0].adaptive.min_budget: the pool has several budgets: give min_budget per quota type, e.g. "
     "{producer_byte_rate: 100000}"),
    (pools(POOL, {**POOL}), "quotas.pools[1].name: pool p is already quotas.pools[0]"),
    (pools(POOL, {**POOL, "name": "q", "members": [{"client_id_prefix": "job-a-x"}]}),
     "quotas.pools[1]: pool q and pool p (quotas.pools[0]) could both take a principal for producer_byte_rate: in "
     "at most one pool per quota type; narrow the members (or topics), or budget other types"),
    (pools({"name": "t1", "producer_byte_rate": 5, "topics": ["logs-*"]},
           {"name": "t2", "producer_byte_rate": 5, "topics": ["*-eu"], "members": [{"user": "u"}]}),
     "quotas.pools[1]: pool t2 and pool t1 (quotas.pools[0]) could both take a topic's bytes for producer_byte_rate: "
     "in at most one pool per quota type; narrow the members (or topics), or budget other types"),
])
def test_refusals(section: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        quota_settings_from(section)
    assert str(info.value) == f"config error: {message}"


@pytest.mark.parametrize("second", [
    {"name": "q", "producer_byte_rate": 5, "members": [{"client_id_prefix": "etl-"}]},   # disjoint prefixes
    {"name": "q", "consumer_byte_rate": 5, "members": [{"client_id_prefix": "job-"}]},   # another type
    {"name": "q", "producer_byte_rate": 5, "topics": ["events"]},                        # a topic pool
    {"name": "q", "producer_byte_rate": 5, "members": [{"client_id": "jo"}]},            # "jo" lacks the prefix
])
def test_pools_that_never_charge_one_request_twice_coexist(second: dict) -> None:
    assert len(quota_settings_from(pools(POOL, second)).pools) == 2


selectors = st.fixed_dictionaries({}, optional={
    "user": st.sampled_from(["alice", "bob"]),
    "client_id": st.sampled_from(["job-a-1", "job-b-1", "svc"]),
}).filter(bool) | st.fixed_dictionaries({"client_id_prefix": st.sampled_from(["job-", "job-a-", "etl-"])})


@given(st.lists(st.tuples(st.sampled_from(["producer_byte_rate", "consumer_byte_rate", "request_rate"]),
                          st.lists(selectors, min_size=1, max_size=3)), max_size=4),
       st.lists(st.sampled_from(["job-a-", "job-b-", "svc"]), unique=True, max_size=3))
def test_valid_pool_sections_round_trip(specs: list, members: list[str]) -> None:
    section = {"entities": [{"client_id_prefix": m, "weight": 2} for m in members],
               "pools": [{"name": f"p{i}", quota_type: 1000, "members": sel} for i, (quota_type, sel) in
                         enumerate(specs)]}
    try:
        settings = quota_settings_from(section)
    except ConfigError as exc:
        assert "could both take a principal" in exc.message or "quotas.pools is empty" in exc.message
        return
    assert quota_settings_from(quota_document(settings)) == settings


def test_an_adaptive_pool_refuses_a_sampled_rate_written_out() -> None:
    adaptive = {**POOL, "adaptive": {"target_latency_ms": 100}}
    with pytest.raises(ConfigError, match=r"quotas.algorithm: sampled, but the members of adaptive pool p "
                                          r"measure with a token bucket"):
        quota_settings_from({"algorithm": "sampled", "pools": [adaptive]})
    # Left out (the default) or token_bucket: accepted, and a dump of it reads back.
    for data in ({"pools": [adaptive]}, {"algorithm": "token_bucket", "pools": [adaptive]}):
        settings = quota_settings_from(data)
        assert quota_settings_from(quota_document(settings)) == settings


def test_a_topic_pool_cannot_be_adaptive() -> None:
    topic_pool = {"name": "t", "producer_byte_rate": 100, "topics": ["events"], "adaptive": {"target_latency_ms": 100}}
    with pytest.raises(ConfigError, match=r"quotas.pools\[0\].adaptive: applies to a pool of members"):
        quota_settings_from({"pools": [topic_pool]})
