"""`classes:` of a pool (config/pool_section.py) and the entries that name one member of it: the
issue's config as written, the round trip through `quota_document`, and every refusal with its key."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from kqp.config import ConfigError, quota_settings_from
from kqp.config.quota_section import quota_document
from kqp.quotas.pools.spec import MemberSelector, ServiceClass

ISSUE = yaml.safe_load("""
window_size_seconds: 0.2
pools:
  - name: ingest
    producer_byte_rate: 10000000
    members: [{client_id_prefix: job-}]
    adaptive: {target_latency_ms: 100}
    classes:
      - name: latency
        members: [{client_id_prefix: job-stream-}]
        max_share: 0.5            # optional: the most this class may take of the budget
        burst_seconds: 2          # optional: credit for a micro-batch trigger
      - name: batch
        members: [{client_id_prefix: job-batch-}]
""")


def issue(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(ISSUE)
    data["pools"][0].update(changes)
    return data


def classes(*entries: dict[str, Any], entities: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    data = issue(classes=list(entries))
    if entities is not None:
        data["entities"] = entities
    return data


STREAM = {"name": "latency", "members": [{"client_id_prefix": "job-stream-"}]}
BATCH = {"name": "batch", "members": [{"client_id_prefix": "job-batch-"}]}


def test_the_issue_config_loads_as_written_and_round_trips() -> None:
    settings = quota_settings_from(ISSUE)
    [pool] = settings.pools
    assert pool.classes == (
        ServiceClass("latency", (MemberSelector(client_id_prefix="job-stream-"),), 0.5, 2.0),
        ServiceClass("batch", (MemberSelector(client_id_prefix="job-batch-"),)),
    )
    # the member key's pattern decides the class; a member no class names is in the lowest
    assert pool.rank("ANONYMOUS", "job-stream-7", None) == 0
    assert pool.rank("ANONYMOUS", "job-batch-1", None) == 1
    assert pool.rank("ANONYMOUS", "job-other", None) == 1
    assert quota_settings_from(quota_document(settings)) == settings
    assert quota_settings_from(yaml.safe_load(yaml.safe_dump(quota_document(settings)))) == settings


def test_the_last_class_may_take_everyone_else() -> None:
    settings = quota_settings_from(classes(STREAM, {"name": "rest"}))
    assert settings.pools[0].classes[1].members == ()
    assert quota_settings_from(quota_document(settings)) == settings


@pytest.mark.parametrize(("section", "message"), [
    (classes({**STREAM, "weight": 2}, BATCH),
     "quotas.pools[0].classes[0].weight: unknown key; expected one of name, members, max_share, burst_seconds"),
    (classes({**STREAM, "max_shares": 0.5}, BATCH),
     "quotas.pools[0].classes[0].max_shares: unknown key; did you mean 'max_share'?"),
    (classes({"members": STREAM["members"]}, BATCH), "quotas.pools[0].classes[0]: needs a name"),
    (classes(STREAM, {**BATCH, "name": "latency"}),
     "quotas.pools[0].classes[1].name: class latency is already quotas.pools[0].classes[0]"),
    (classes({"name": "latency"}, BATCH),
     "quotas.pools[0].classes[0]: class latency has no members; only the last class may leave them out (it takes "
     "every member the classes above do not)"),
    (classes(STREAM, {"name": "batch", "members": [{"client_id_prefix": "job-s"}]}),
     "quotas.pools[0].classes[1].members[0]: {client_id_prefix=job-s} could take a principal that class latency "
     "(quotas.pools[0].classes[0]) takes too; a member is in one class"),
    (classes(STREAM, {"name": "batch", "members": [{"client_id": "job-stream-9"}]}),
     "quotas.pools[0].classes[1].members[0]: {client_id=job-stream-9} could take a principal that class latency "
     "(quotas.pools[0].classes[0]) takes too; a member is in one class"),
    (classes(STREAM, {"name": "batch", "members": [{"client_id_prefix": "etl-"}]}),
     "quotas.pools[0].classes[1].members[0]: {client_id_prefix=etl-} selects no member of the pool; class members "
     "are pool members"),
    (classes({**STREAM, "max_share": 0}, BATCH),
     "quotas.pools[0].classes[0].max_share: must be a positive number (the most the class takes of the budget), "
     "got 0"),
    (classes({**STREAM, "max_share": 1.5}, BATCH),
     "quotas.pools[0].classes[0].max_share: must be a fraction of the pool's budget, 0..1, got 1.5"),
    (classes({**STREAM, "burst_seconds": -1}, BATCH),
     "quotas.pools[0].classes[0].burst_seconds: must be a non-negative number, got -1"),
    (classes(STREAM, {**BATCH, "burst_seconds": 2}),
     "quotas.pools[0].classes[1].burst_seconds: class batch is the lowest: what a class bursts above its quota is "
     "taken back from the classes below it, and none is"),
    (issue(classes=[]), "quotas.pools[0].classes: must be a non-empty list of classes, got a list"),
    (issue(classes={"latency": STREAM}), "quotas.pools[0].classes: must be a non-empty list of classes, "
                                         "got a mapping"),
    # one member (the prefix entity job-) whose principals two classes would split
    (classes(STREAM, BATCH, entities=[{"client_id_prefix": "job-", "weight": 2}]),
     "quotas.entities[0]: /client-id-prefixes/job- is one member of pool ingest, but class latency takes only some "
     "of its principals ({client_id_prefix=job-stream-}): a member is in one class; give those principals an entry "
     "of their own, or narrow the entry"),
    # a user's one member across client ids, split by classes of client ids
    (classes(STREAM, BATCH, entities=[{"user": "<default>", "producer_byte_rate": 10**9}]),
     "quotas.entities[0]: /users/<default> is one member of pool ingest, but class latency takes only some of its "
     "principals ({client_id_prefix=job-stream-}): a member is in one class; give those principals an entry of "
     "their own, or narrow the entry"),
])
def test_refusals_name_the_key(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        quota_settings_from(section)
    assert str(info.value) == f"config error: {message}"


@pytest.mark.parametrize("entities", [
    [{"client_id_prefix": "job-stream-", "weight": 2}],                      # inside one class
    [{"client_id": "<default>", "producer_byte_rate": 10**9}],              # one member per client id
    [{"client_id_prefix": "job-", "weight": 2}, {"client_id_prefix": "job-stream-"}],   # a longer prefix first
    [{"client_id_prefix": "job-stream-", "consumer_byte_rate": 5}],         # another type: no member of this pool
    [{"client_id_prefix": "other-", "weight": 2}],                          # outside the classes: the lowest
])
def test_entries_that_keep_each_member_in_one_class(entities: list[dict[str, Any]]) -> None:
    assert quota_settings_from(classes(STREAM, BATCH, entities=entities)).pools[0].classes
