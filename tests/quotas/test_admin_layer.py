"""The admin API's layer over the config file's quotas: which value is in force, and from where."""

from __future__ import annotations

from kqp.quotas.admin_layer import CONFIG_FILE, STATE_FILE, apply_changes, overlay, sources
from kqp.quotas.model import EntitySpec, QuotaSettings

ALICE, BOB = EntitySpec("alice", None), EntitySpec("bob", "<default>")
BASE = QuotaSettings(window_size_seconds=2, window_count=5,
                     entities={ALICE: {"producer_byte_rate": 1000, "consumer_byte_rate": 5000}})


def test_an_empty_layer_is_the_base_itself() -> None:
    assert overlay(BASE, {}) is BASE


def test_the_state_file_wins_for_the_same_entity_and_key_and_adds_entities() -> None:
    layer = apply_changes({}, BASE, [(ALICE, {"producer_byte_rate": 2048.0}), (BOB, {"request_percentage": 12.5})])
    merged = overlay(BASE, layer)
    assert dict(merged.entities[ALICE]) == {"producer_byte_rate": 2048.0, "consumer_byte_rate": 5000}
    assert dict(merged.entities[BOB]) == {"request_percentage": 12.5}
    assert (merged.window_size_seconds, merged.window_count) == (2, 5)   # windows stay the config file's


def test_removing_a_config_file_value_hides_it_and_removing_a_state_value_drops_it() -> None:
    layer = apply_changes({}, BASE, [(ALICE, {"consumer_byte_rate": None}), (BOB, {"request_percentage": 3.0})])
    assert dict(layer[ALICE]) == {"consumer_byte_rate": None}   # a tombstone: the base sets it
    layer = apply_changes(layer, BASE, [(BOB, {"request_percentage": None})])
    assert BOB not in layer   # only the layer had it: nothing left to hide
    merged = overlay(BASE, layer)
    assert dict(merged.entities[ALICE]) == {"producer_byte_rate": 1000}


def test_an_entity_whose_every_value_is_removed_is_gone() -> None:
    layer = apply_changes({}, BASE, [(ALICE, {"consumer_byte_rate": None, "producer_byte_rate": None})])
    assert ALICE not in overlay(BASE, layer).entities


def test_setting_again_replaces_a_tombstone() -> None:
    layer = apply_changes({}, BASE, [(ALICE, {"consumer_byte_rate": None})])
    layer = apply_changes(layer, BASE, [(ALICE, {"consumer_byte_rate": 7.0})])
    assert overlay(BASE, layer).entities[ALICE]["consumer_byte_rate"] == 7.0


def test_sources_name_each_value_s_layer() -> None:
    layer = apply_changes({}, BASE, [(ALICE, {"consumer_byte_rate": None, "producer_byte_rate": 9.0}),
                                     (BOB, {"request_rate": 4.0})])
    assert sources(BASE, layer) == [
        (ALICE, "consumer_byte_rate", 5000, f"removed by the {STATE_FILE}"),
        (ALICE, "producer_byte_rate", 9.0, STATE_FILE),
        (BOB, "request_rate", 4.0, STATE_FILE),
    ]
    assert sources(BASE, {})[0][3] == CONFIG_FILE


def test_a_removal_the_config_file_no_longer_needs_is_ignored() -> None:
    # The state file keeps alice's consumer quota removed; then the YAML stops setting it, and then
    # drops alice: the leftover removal hides nothing, and neither describe nor the overlay trips on it.
    layer = apply_changes({}, BASE, [(ALICE, {"consumer_byte_rate": None})])
    base = QuotaSettings(window_size_seconds=2, window_count=5, entities={ALICE: {"producer_byte_rate": 1000}})
    assert sources(base, layer) == [(ALICE, "producer_byte_rate", 1000, CONFIG_FILE)]
    assert dict(overlay(base, layer).entities[ALICE]) == {"producer_byte_rate": 1000}
    empty = QuotaSettings(window_size_seconds=2, window_count=5, entities={})
    assert sources(empty, layer) == [] and overlay(empty, layer).entities == {}
