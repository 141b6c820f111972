"""`entity_changes`: what a settings change did to each entity's quotas, as the audit trail records it."""

from __future__ import annotations

import dataclasses

from kqp.quotas.admin_layer import apply_changes, overlay
from kqp.quotas.changes import EntityChange, entity_changes
from kqp.quotas.model import EntitySpec, QuotaSettings

ALICE, BOB, ETL = EntitySpec("alice", None), EntitySpec("bob", "<default>"), EntitySpec(None, "etl")
BASE = QuotaSettings(window_size_seconds=1, window_count=11, entities={
    ALICE: {"producer_byte_rate": 1000.0, "consumer_byte_rate": 5000.0},
    ETL: {"request_rate": 10.0},
})


def test_no_change_no_record() -> None:
    assert entity_changes(BASE, BASE) == []
    # Windows and algorithms are not entity values: the reload's lines name them, the audit does not.
    assert entity_changes(BASE, dataclasses.replace(BASE, window_count=5, algorithm="token_bucket")) == []


def test_changed_added_and_removed_entities_each_once_in_path_order_with_all_their_values() -> None:
    new = dataclasses.replace(BASE, entities={
        ALICE: {"consumer_byte_rate": 5000.0, "producer_byte_rate": 2048.0},   # one value changed
        BOB: {"request_percentage": 12.5},                                     # added
    })                                                                         # ETL removed
    changes = entity_changes(BASE, new)
    assert list(changes[1].before) == ["producer_byte_rate", "consumer_byte_rate"]   # dicts compare unordered
    assert changes == [
        # Paths: /clients/etl < /users/alice < /users/bob/clients/<default>. Values in QUOTA_TYPES order
        # (producer before consumer), the unchanged consumer_byte_rate too, so one record reads alone.
        EntityChange(ETL, {"request_rate": 10.0}, {}),
        EntityChange(ALICE, {"producer_byte_rate": 1000.0, "consumer_byte_rate": 5000.0},
                     {"producer_byte_rate": 2048.0, "consumer_byte_rate": 5000.0}),
        EntityChange(BOB, {}, {"request_percentage": 12.5}),
    ]


def test_an_admin_change_over_the_config_file_is_what_the_overlay_changes() -> None:
    # Removing alice's consumer_byte_rate through the API hides the config file's 5000: the quota in
    # force loses it. Setting ETL's request_rate to what it already is changes nothing in force.
    layer = apply_changes({}, BASE, [(ALICE, {"consumer_byte_rate": None}), (ETL, {"request_rate": 10.0})])
    assert entity_changes(BASE, overlay(BASE, layer)) == [
        EntityChange(ALICE, {"producer_byte_rate": 1000.0, "consumer_byte_rate": 5000.0},
                     {"producer_byte_rate": 1000.0})]
